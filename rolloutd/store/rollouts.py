"""Rollout rows: create one (at most one active per service and environment), read, and save.

Progress is written with optimistic concurrency: every write names the revision it read and
bumps it, so a write based on a stale read fails with :class:`StaleWrite` instead of silently
undoing someone else's. The daemon will AND its lease-epoch check into the same WHERE clause.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NotRequired, TypedDict, Unpack

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from rolloutd.errors import NotFound, Refused
from rolloutd.store.errors import StaleWrite
from rolloutd.store.events import append_event
from rolloutd.store.lease import Fence
from rolloutd.store.models import Rollout
from rolloutd.store.writes import rowcount


class NewRollout(TypedDict):
    """Which plan a new rollout runs, where, and the state machine's first progress."""

    name: str
    service: str
    environment: str
    plan_hash: str
    plan_source: str
    plan_path: str
    steps: int
    plan_outline: NotRequired[dict[str, Any]]
    """What the views show of the plan; without it they derive that from the plan text."""
    progress: dict[str, Any]
    state: str


def create_rollout(
    session: Session, *, actor: str, now: datetime, **new: Unpack[NewRollout]
) -> int:
    """Insert an active rollout and its "created" event; return the new rollout's id.

    :raises Refused: when another rollout of the same service and environment is active.
    """
    _refuse_if_active(session, new["service"], new["environment"])
    rollout = Rollout(
        **new, active=True, revision=0, created_by=actor, created_at=now, updated_at=now
    )
    try:
        with session.begin_nested():
            session.add(rollout)
    except IntegrityError:
        # Another transaction inserted an active rollout between our check and our insert, and
        # the partial unique index stopped us; the savepoint keeps the caller's transaction alive.
        _refuse_if_active(session, new["service"], new["environment"])
        raise
    append_event(
        session,
        rollout_id=rollout.id,
        kind="created",
        actor=actor,
        detail=f"created {new['name']} for {new['service']}/{new['environment']}"
        f" from {new['plan_path']}",
        data={"plan_hash": new["plan_hash"], "plan_path": new["plan_path"], "state": new["state"]},
        now=now,
    )
    return rollout.id


def _refuse_if_active(session: Session, service: str, environment: str) -> None:
    existing = session.scalars(
        select(Rollout)
        .where(Rollout.service == service, Rollout.environment == environment, Rollout.active)
        .limit(1)
    ).first()
    if existing is not None:
        raise Refused(
            f"rollout {existing.id} of {service}/{environment} is still {existing.state};"
            " abort it or wait for it to finish"
        )


def get_rollout(session: Session, rollout_id: int, *, for_update: bool = False) -> Rollout:
    """Return rollout ``rollout_id`` (``for_update``: its row locked until the transaction ends).

    :raises NotFound: when there is no such rollout.
    """
    rollout = session.get(Rollout, rollout_id, with_for_update=for_update)
    if rollout is None:
        raise NotFound(f"no rollout {rollout_id}")
    return rollout


def rollouts_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, Rollout]:
    """The rollouts of a batch that exist, by id, in one statement."""
    return {r.id: r for r in session.scalars(select(Rollout).where(Rollout.id.in_(rollout_ids)))}


def keep_light(session: Session, rollout: Rollout) -> None:
    """Detach ``rollout`` (if attached) and drop its plan text, outline and progress, read or
    written already: what a
    leader keeps of thousands of rollouts between ticks is who they are, their state and
    revision (a write of new progress sets it again)."""
    if rollout in session:
        session.expunge(rollout)
    for name in ("plan_source", "plan_outline", "progress"):
        rollout.__dict__.pop(name, None)


def list_rollouts(session: Session, *, active_only: bool = False, limit: int = 50) -> list[Rollout]:
    """Return up to ``limit`` rollouts, newest first."""
    query = select(Rollout).order_by(Rollout.created_at.desc(), Rollout.id.desc()).limit(limit)
    if active_only:
        query = query.where(Rollout.active)
    return list(session.scalars(query))


def save_progress(
    session: Session,
    rollout: Rollout,
    *,
    progress: dict[str, Any],
    state: str,
    active: bool,
    now: datetime,
    fence: Fence | None = None,
) -> None:
    """Write the state machine's progress if nobody wrote the rollout since it was read.

    ``rollout`` is updated in place (``revision`` bumped) on success.

    ``fence``: an extra condition ANDed into the UPDATE's WHERE clause. The daemon passes its
    lease-epoch check here, so that an ex-leader that lost the lease cannot write.

    :raises StaleWrite: when the revision moved on, or ``fence`` does not hold; nothing was
        written.
    """
    expected = rollout.revision
    statement = update(Rollout).where(Rollout.id == rollout.id, Rollout.revision == expected)
    if fence is not None:
        statement = statement.where(fence)
    statement = statement.values(
        progress=progress,
        state=state,
        active=active,
        revision=Rollout.revision + 1,
        updated_at=now,
    ).execution_options(synchronize_session=False)
    if rowcount(session.execute(statement)) != 1:
        raise StaleWrite(rollout.id, expected)
    written = {
        "progress": progress,
        "state": state,
        "active": active,
        "revision": expected + 1,
        "updated_at": now,
    }
    for key, value in written.items():
        set_committed_value(rollout, key, value)
