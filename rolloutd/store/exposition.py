"""What the daemon's ``/metrics`` reads on each scrape, each in one statement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, select
from sqlalchemy.orm import Session

from rolloutd.store.evaluations import GateLatest, latest_of_rollouts
from rolloutd.store.models import Action, Event, Rollout
from rolloutd.store.reads import RolloutRow


def _visible(ended_since: datetime) -> ColumnElement[bool]:
    return Rollout.active.is_(True) | (Rollout.updated_at >= ended_since)


def visible_revisions(session: Session, ended_since: datetime) -> list[tuple[int, int]]:
    """``(id, revision)`` of the active rollouts and of those whose last write (the one that
    ended them) is ``ended_since`` or later, by id: a scrape reads again only the rows whose
    revision moved since it last showed them."""
    query = select(Rollout.id, Rollout.revision).where(_visible(ended_since))
    return [
        (rollout_id, revision)
        for rollout_id, revision in session.execute(query.order_by(Rollout.id))
    ]


def rollout_rows(session: Session, rollout_ids: Sequence[int]) -> list[tuple[int, RolloutRow]]:
    """The rows of ``rollout_ids`` with their revisions: rows, not ORM objects, and without
    their plan text unless they have no stored outline (a scrape has no use for plans)."""
    columns: list[Any] = [getattr(Rollout, name) for name in RolloutRow._fields]
    columns[RolloutRow._fields.index("plan_source")] = case(
        (Rollout.plan_outline.is_(None), Rollout.plan_source), else_=literal("")
    ).label("plan_source")
    query = select(Rollout.revision, *columns).where(Rollout.id.in_(rollout_ids))
    return [(revision, RolloutRow._make(row)) for revision, *row in session.execute(query)]


def newest_verdicts(
    session: Session,
    ended_since: datetime,
    gates: Mapping[int, Iterable[str]],
    ids: tuple[int, int],
) -> dict[int, dict[str, GateLatest]]:
    """The newest evaluation of each of ``gates`` (rollout id -> gate names) of a chunk of the
    rollouts :func:`visible_revisions` read, those from ``ids[0]`` to ``ids[1]``: selected by
    the same condition and the range rather than by their ids."""
    among = _visible(ended_since) & Rollout.id.between(*ids)
    return latest_of_rollouts(session, gates, among=among)


def attempts_by_kind(
    session: Session, ended_since: datetime, ids: tuple[int, int]
) -> list[tuple[int, str, int]]:
    """The attempts made at each kind of action, per rollout: ``(rollout_id, kind, attempts)``,
    of a chunk of the rollouts :func:`visible_revisions` read, those from ``ids[0]`` to
    ``ids[1]``: selected by the same condition and the range rather than by their ids (a
    statement of a thousand ids cost more to send than to answer)."""
    rows = session.execute(
        select(Action.rollout_id, Action.kind, func.sum(Action.attempts))
        .join(Rollout, Rollout.id == Action.rollout_id)
        .where(_visible(ended_since) & Rollout.id.between(*ids))
        .group_by(Action.rollout_id, Action.kind)
        .order_by(Action.rollout_id, Action.kind)
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
