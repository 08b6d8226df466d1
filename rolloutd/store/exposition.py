"""What the daemon's ``/metrics`` reads on each scrape, each in one statement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from rolloutd.store.evaluations import GateLatest, latest_of_rollouts
from rolloutd.store.models import Action, Event, Rollout
from rolloutd.store.reads import RolloutRow


def _visible(ended_since: datetime) -> ColumnElement[bool]:
    return Rollout.active.is_(True) | (Rollout.updated_at >= ended_since)


def visible_rollouts(session: Session, ended_since: datetime) -> list[RolloutRow]:
    """The active rollouts and those whose last write (the one that ended them) is
    ``ended_since`` or later, by id: their rows, not ORM objects (a scrape of 10,000 rollouts
    has no use for their plans)."""
    columns = [getattr(Rollout, name) for name in RolloutRow._fields]
    query = select(*columns).where(_visible(ended_since)).order_by(Rollout.id)
    return [RolloutRow._make(row) for row in session.execute(query)]


def newest_verdicts(
    session: Session, ended_since: datetime, gates: Mapping[int, Iterable[str]]
) -> dict[int, dict[str, GateLatest]]:
    """The newest evaluation of each of ``gates`` (rollout id -> gate names) of the rollouts
    :func:`visible_rollouts` read, selected by the same condition rather than by their ids."""
    return latest_of_rollouts(session, gates, among=_visible(ended_since))


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
