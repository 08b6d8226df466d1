"""The audit log: every state change, command and daemon-level happening, in order.

Replays after a crash re-run the same writes, so an event may carry a ``dedup_key``: the second
attempt to record it is a no-op that leaves the surrounding transaction intact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rolloutd.store.models import Event
from rolloutd.store.upserts import insert_unless_exists


def append_event(
    session: Session,
    *,
    rollout_id: int | None,
    kind: str,
    actor: str,
    detail: str,
    data: dict[str, Any] | None = None,
    now: datetime,
    dedup_key: str | None = None,
) -> bool:
    """Record an event; ``rollout_id`` is None for daemon-level events such as leadership.

    :returns: False, recording nothing, when an event with the same ``(rollout_id, dedup_key)``
        exists already; True otherwise.
    """
    new_id = insert_unless_exists(
        session,
        Event,
        rollout_id=rollout_id,
        at=now,
        kind=kind,
        actor=actor,
        detail=detail,
        data=data if data is not None else {},
        dedup_key=dedup_key,
    )
    return new_id is not None


def list_events(session: Session, rollout_id: int | None) -> list[Event]:
    """Return the events of a rollout (or the daemon-level ones, for None), oldest first."""
    where = Event.rollout_id.is_(None) if rollout_id is None else Event.rollout_id == rollout_id
    return list(session.scalars(select(Event).where(where).order_by(Event.at, Event.id)))
