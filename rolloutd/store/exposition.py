"""What the daemon's ``/metrics`` reads on each scrape, each in one statement."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, select
from sqlalchemy.orm import Session

from rolloutd.store.evaluations import GateLatest, latest_of_rollouts
from rolloutd.store.models import Action, Event, Rollout
from rolloutd.store.reads import RolloutRow


def _visible(ended_since: datetime) -> ColumnElement[bool]:
    return Rollout.active.is_(True) | (Rollout.updated_at >= ended_since)


def visible_rollouts(
    session: Session, ended_since: datetime, *, chunk: int = 1_000
) -> Iterator[list[RolloutRow]]:
    """The active rollouts and those whose last write (the one that ended them) is
    ``ended_since`` or later, by id, ``chunk`` rows at a time: their rows, not ORM objects,
    and without their plan text unless they have no stored outline (a scrape of 10,000
    rollouts has no use for their plans, and holds one chunk of rows at a time)."""
    columns: list[Any] = [getattr(Rollout, name) for name in RolloutRow._fields]
    columns[RolloutRow._fields.index("plan_source")] = case(
        (Rollout.plan_outline.is_(None), Rollout.plan_source), else_=literal("")
    ).label("plan_source")
    after = 0
    while True:
        query = select(*columns).where(_visible(ended_since), Rollout.id > after)
        rows = [
            RolloutRow._make(row)
            for row in session.execute(query.order_by(Rollout.id).limit(chunk))
        ]
        if rows:
            yield rows
        if len(rows) < chunk:
            return
        after = rows[-1].id


def newest_verdicts(
    session: Session,
    ended_since: datetime,
    gates: Mapping[int, Iterable[str]],
    ids: tuple[int, int],
) -> dict[int, dict[str, GateLatest]]:
    """The newest evaluation of each of ``gates`` (rollout id -> gate names) of a chunk of the
    rollouts :func:`visible_rollouts` read, those from ``ids[0]`` to ``ids[1]``: selected by the
    same condition and the range rather than by their ids."""
    among = _visible(ended_since) & Rollout.id.between(*ids)
    return latest_of_rollouts(session, gates, among=among)


def attempts_by_kind(session: Session, rollout_ids: Sequence[int]) -> list[tuple[int, str, int]]:
    """The attempts made at each kind of action, per rollout: ``(rollout_id, kind, attempts)``."""
    if not rollout_ids:
        return []
    rows = session.execute(
        select(Action.rollout_id, Action.kind, func.sum(Action.attempts))
        .where(Action.rollout_id.in_(rollout_ids))
        .group_by(Action.rollout_id, Action.kind)
    )
    return [(rollout_id, kind, int(attempts or 0)) for rollout_id, kind, attempts in rows]


def events_of_kinds(
    session: Session, rollout_ids: Sequence[int], kinds: Sequence[str]
) -> list[tuple[int, str, str, dict[str, Any] | None]]:
    """The events of ``kinds`` of the rollouts: ``(rollout_id, kind, detail, data)``."""
    if not rollout_ids:
        return []
    rows = session.execute(
        select(Event.rollout_id, Event.kind, Event.detail, Event.data).where(
            Event.rollout_id.in_(rollout_ids), Event.kind.in_(kinds)
        )
    )
    return [(r, k, d, data) for r, k, d, data in rows]
