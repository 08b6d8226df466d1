"""The intent log: side effects written as pending before they run, marked done after.

Every action has a deterministic key (for example ``<rollout>-<plan hash>-<step>-weights``), so
enqueueing the same actions again after a crash adds nothing, and the daemon replays exactly the
pending ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound
from rolloutd.store.models import Action
from rolloutd.store.upserts import insert_on_conflict

ActionOutcome = Literal["done", "failed"]


def enqueue_actions(
    session: Session,
    *,
    rollout_id: int,
    actions: Sequence[tuple[str, str, dict[str, Any]]],
    now: datetime,
) -> list[Action]:
    """Record ``(key, kind, payload)`` actions as pending, skipping keys the rollout already has.

    :returns: the rows that were added, in the order given.
    """
    added: list[int] = []
    for key, kind, payload in actions:
        new_id = session.scalar(
            insert_on_conflict(session, Action)
            .values(
                rollout_id=rollout_id,
                key=key,
                kind=kind,
                payload=payload,
                status="pending",
                attempts=0,
                created_at=now,
            )
            .on_conflict_do_nothing()
            .returning(Action.id)
        )
        if new_id is not None:
            added.append(new_id)
    if not added:
        return []
    rows = session.scalars(select(Action).where(Action.id.in_(added))).all()
    by_id = {row.id: row for row in rows}
    return [by_id[action_id] for action_id in added]


def pending_actions(session: Session, rollout_id: int | None = None) -> list[Action]:
    """Return pending actions, of one rollout or of all, oldest first."""
    query = select(Action).where(Action.status == "pending")
    if rollout_id is not None:
        query = query.where(Action.rollout_id == rollout_id)
    return list(session.scalars(query.order_by(Action.created_at, Action.id)))


def finish_action(
    session: Session,
    action_id: int,
    *,
    status: ActionOutcome,
    now: datetime,
    error: str | None = None,
) -> None:
    """Mark an action done or failed (``error`` says why it failed).

    :raises NotFound: when there is no such action.
    """
    action = _get_action(session, action_id)
    action.status = status
    action.done_at = now
    if error is not None:
        action.last_error = error
    session.flush()


def bump_action_attempt(
    session: Session, action_id: int, *, error: str, retry_at: datetime | None = None
) -> None:
    """Count one more failed attempt at a still-pending action, keeping the newest error;
    ``retry_at`` (wall clock) holds the next attempt back until then.

    :raises NotFound: when there is no such action.
    """
    result = cast(
        CursorResult[Any],
        session.execute(
            update(Action)
            .where(Action.id == action_id)
            .values(attempts=Action.attempts + 1, last_error=error, next_attempt_at=retry_at)
        ),
    )
    if result.rowcount != 1:
        raise NotFound(f"no action {action_id}")


def done_action_keys(session: Session, rollout_id: int) -> frozenset[str]:
    """The keys of a rollout's actions that were performed."""
    keys = session.scalars(
        select(Action.key).where(Action.rollout_id == rollout_id, Action.status == "done")
    )
    return frozenset(keys)


def last_done(session: Session, rollout_id: int, kind: str) -> Action | None:
    """The most recently performed action of ``kind``: for weights, what the router should read."""
    return session.scalar(
        select(Action)
        .where(Action.rollout_id == rollout_id, Action.kind == kind, Action.status == "done")
        .order_by(Action.done_at.desc(), Action.id.desc())
        .limit(1)
    )


def _get_action(session: Session, action_id: int) -> Action:
    action = session.get(Action, action_id)
    if action is None:
        raise NotFound(f"no action {action_id}")
    return action
