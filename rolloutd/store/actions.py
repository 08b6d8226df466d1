"""The journal of attempts: side effects written as pending before they run, marked done after.

Every action has a deterministic key (``weight@gen7=0``, ``rollback/deploy/gpu-d``, ...), so
enqueueing the same actions again after a crash adds nothing. A weight attempt serves one
generation of the rollout's desired weight; when a newer generation is written, the older
attempts still open are marked ``superseded`` in the same transaction and never performed.
An attempt that failed for good is ``failed`` (it may be tried again after a long wait, while
its fact is still the current one).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound
from rolloutd.store.models import Action
from rolloutd.store.upserts import insert_unless_exists
from rolloutd.store.writes import rowcount

ActionOutcome = Literal["done", "failed"]
OPEN = ("pending", "failed")


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
        new_id = insert_unless_exists(
            session,
            Action,
            rollout_id=rollout_id,
            key=key,
            kind=kind,
            payload=payload,
            status="pending",
            attempts=0,
            created_at=now,
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


def open_actions_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, list[Action]]:
    """Each rollout's actions not performed yet (pending, or failed and to be tried again),
    oldest first, for a batch, in one statement."""
    found: dict[int, list[Action]] = {i: [] for i in rollout_ids}
    query = select(Action).where(Action.rollout_id.in_(found), Action.status.in_(OPEN))
    for action in session.scalars(query.order_by(Action.created_at, Action.id)):
        found[action.rollout_id].append(action)
    return found


def action_by_key(session: Session, rollout_id: int, key: str) -> Action | None:
    """The rollout's action under ``key``, if there is one."""
    return session.scalar(select(Action).where(Action.rollout_id == rollout_id, Action.key == key))


def supersede_weight_attempts(
    session: Session, rollout_id: int, *, current: str, now: datetime
) -> list[str]:
    """Mark every open weight attempt of the rollout other than ``current`` superseded.

    :returns: the keys that were superseded.
    """
    stale = list(
        session.scalars(
            select(Action.key).where(
                Action.rollout_id == rollout_id,
                Action.kind == "set_weight",
                Action.status.in_(OPEN),
                Action.key != current,
            )
        )
    )
    if stale:
        session.execute(
            update(Action)
            .where(Action.rollout_id == rollout_id, Action.key.in_(stale))
            .values(status="superseded", done_at=now)
        )
    return stale


def reopen_action(session: Session, action_id: int) -> None:
    """Make a performed attempt pending again: the world lost what it did (drift).

    :raises NotFound: when there is no such action.
    """
    action = _get_action(session, action_id)
    action.status = "pending"
    action.done_at = None
    action.attempts = 0
    action.next_attempt_at = None
    session.flush()


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
    session: Session,
    action_id: int,
    *,
    error: str,
    retry_at: datetime | None = None,
    permanent: bool = False,
) -> None:
    """Count one more failed attempt at an open action, keeping the newest error;
    ``retry_at`` (wall clock) holds the next attempt back until then. A ``permanent``
    failure marks the attempt ``failed``.

    :raises NotFound: when there is no such action.
    """
    values: dict[str, Any] = {
        "attempts": Action.attempts + 1,
        "last_error": error,
        "next_attempt_at": retry_at,
    }
    if permanent:
        values["status"] = "failed"
    result = session.execute(update(Action).where(Action.id == action_id).values(**values))
    if rowcount(result) != 1:
        raise NotFound(f"no action {action_id}")


def done_action_keys(session: Session, rollout_id: int) -> frozenset[str]:
    """The keys of a rollout's actions that were performed."""
    keys = session.scalars(
        select(Action.key).where(Action.rollout_id == rollout_id, Action.status == "done")
    )
    return frozenset(keys)


def done_action_keys_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, frozenset[str]]:
    """Each rollout's performed action keys (as :func:`done_action_keys`), for a batch, in one
    statement."""
    found: dict[int, set[str]] = {i: set() for i in rollout_ids}
    query = select(Action.rollout_id, Action.key).where(
        Action.rollout_id.in_(found), Action.status == "done"
    )
    for rollout_id, key in session.execute(query):
        found[rollout_id].add(key)
    return {i: frozenset(keys) for i, keys in found.items()}


def _get_action(session: Session, action_id: int) -> Action:
    action = session.get(Action, action_id)
    if action is None:
        raise NotFound(f"no action {action_id}")
    return action
