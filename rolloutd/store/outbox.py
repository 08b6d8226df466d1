"""Reads and writes of the alert outbox (see :mod:`rolloutd.store.outbox_models`).

Enqueueing is keyed: the second insert of a key is a no-op that leaves the surrounding
transaction intact, so the transaction that records an event can add its alerts again on a
replay. The sender takes the oldest pending message of each webhook, chosen in SQL, so one
channel's messages arrive in order and no backlog on one channel (a broken webhook, an unset
variable) hides the others' messages from it.

Every write of the sender can carry a ``fence`` (see :func:`rolloutd.store.lease.fence`) ANDed
into its WHERE clause, so a sender that lost the leader lease changes no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from rolloutd.store.lease import Fence
from rolloutd.store.outbox_models import OutboxMessage
from rolloutd.store.upserts import insert_unless_exists
from rolloutd.store.writes import rowcount


@dataclass(frozen=True)
class OutboxStats:
    """How much is waiting, since when, and how much was given up."""

    pending: int
    oldest_pending_at: datetime | None
    failed: int
    sent: int


class NewMessage(TypedDict):
    """One alert for one channel, under the key that makes enqueueing it again a no-op."""

    key: str
    rollout_id: int | None
    topic: str
    severity: str
    channel: str
    webhook_env: str
    message: dict[str, Any]


def enqueue_message(session: Session, *, now: datetime, **alert: Unpack[NewMessage]) -> bool:
    """Add one message for one channel, due at once.

    :returns: False, adding nothing, when a message with ``key`` exists already.
    """
    new_id = insert_unless_exists(
        session,
        OutboxMessage,
        **alert,
        status="pending",
        attempts=0,
        created_at=now,
        next_attempt_at=now,
    )
    return new_id is not None


def heads_of_queues(session: Session, *, fence: Fence | None = None) -> list[OutboxMessage]:
    """The oldest pending message of each webhook (due or not), oldest first.

    ``fence``: read nothing unless it holds (a sender that lost the lease has nothing to send).
    """
    # One row per webhook, however many wait behind it: ranking in SQL rather than reading the
    # oldest N rows, which a backlog on a single webhook fills.
    rank = (
        func.row_number()
        .over(
            partition_by=OutboxMessage.webhook_env,
            order_by=(OutboxMessage.created_at, OutboxMessage.id),
        )
        .label("rank")
    )
    ranked = select(OutboxMessage.id, rank).where(OutboxMessage.status == "pending").subquery()
    query = (
        select(OutboxMessage)
        .join(ranked, ranked.c.id == OutboxMessage.id)
        .where(ranked.c.rank == 1)
        .order_by(OutboxMessage.created_at, OutboxMessage.id)
    )
    if fence is not None:
        query = query.where(fence)
    return list(session.scalars(query))


def mark_sent(
    session: Session, message_id: int, *, now: datetime, fence: Fence | None = None
) -> bool:
    """Slack accepted the message.

    :returns: False, writing nothing, when the message is no longer pending or ``fence`` fails.
    """
    return _count_attempt(session, message_id, fence, status="sent", sent_at=now)


def defer(
    session: Session, message_id: int, *, until: datetime, error: str, fence: Fence | None = None
) -> bool:
    """Count a failed attempt and try again at ``until``.

    :returns: False, writing nothing, when the message is no longer pending or ``fence`` fails.
    """
    return _count_attempt(session, message_id, fence, last_error=error, next_attempt_at=until)


def give_up(
    session: Session, message_id: int, *, now: datetime, error: str, fence: Fence | None = None
) -> bool:
    """Mark a message undeliverable: retrying cannot help (Slack refused it for good).

    :returns: False, writing nothing, when the message is no longer pending or ``fence`` fails.
    """
    return _count_attempt(
        session, message_id, fence, status="failed", last_error=error, sent_at=now
    )


def _count_attempt(session: Session, message_id: int, fence: Fence | None, **values: Any) -> bool:
    """Count one more attempt at a pending message, writing ``values`` with it."""
    statement = (
        update(OutboxMessage)
        .where(OutboxMessage.id == message_id, OutboxMessage.status == "pending")
        .values(attempts=OutboxMessage.attempts + 1, **values)
    )
    if fence is not None:
        statement = statement.where(fence)
    result = session.execute(statement.execution_options(synchronize_session=False))
    return rowcount(result) == 1


def outbox_stats(session: Session) -> OutboxStats:
    """Counts by status and the creation time of the oldest pending message."""
    counts = dict(
        session.execute(
            select(OutboxMessage.status, func.count()).group_by(OutboxMessage.status)
        ).all()
    )
    oldest = session.scalar(
        select(func.min(OutboxMessage.created_at)).where(OutboxMessage.status == "pending")
    )
    return OutboxStats(
        pending=int(counts.get("pending", 0)),
        oldest_pending_at=oldest,
        failed=int(counts.get("failed", 0)),
        sent=int(counts.get("sent", 0)),
    )


def list_messages(session: Session, rollout_id: int | None = None) -> list[OutboxMessage]:
    """Every message (of one rollout, when given), oldest first."""
    query = select(OutboxMessage)
    if rollout_id is not None:
        query = query.where(OutboxMessage.rollout_id == rollout_id)
    return list(session.scalars(query.order_by(OutboxMessage.created_at, OutboxMessage.id)))
