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
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, Update, func, select, update
from sqlalchemy.orm import Session

from rolloutd.store.outbox_models import OutboxMessage
from rolloutd.store.upserts import insert_on_conflict


@dataclass(frozen=True)
class OutboxStats:
    """How much is waiting, since when, and how much was given up."""

    pending: int
    oldest_pending_at: datetime | None
    failed: int
    sent: int


def enqueue_message(
    session: Session,
    *,
    key: str,
    rollout_id: int | None,
    topic: str,
    severity: str,
    channel: str,
    webhook_env: str,
    message: dict[str, Any],
    now: datetime,
) -> bool:
    """Add one message for one channel, due at once.

    :returns: False, adding nothing, when a message with ``key`` exists already.
    """
    statement = (
        insert_on_conflict(session, OutboxMessage)
        .values(
            key=key,
            rollout_id=rollout_id,
            topic=topic,
            severity=severity,
            channel=channel,
            webhook_env=webhook_env,
            message=message,
            status="pending",
            attempts=0,
            created_at=now,
            next_attempt_at=now,
        )
        .on_conflict_do_nothing()
        .returning(OutboxMessage.id)
    )
    return session.scalar(statement) is not None


def heads_of_queues(
    session: Session, *, fence: ColumnElement[bool] | None = None
) -> list[OutboxMessage]:
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
    session: Session, message_id: int, *, now: datetime, fence: ColumnElement[bool] | None = None
) -> bool:
    """Slack accepted the message.

    :returns: False, writing nothing, when the message is no longer pending or ``fence`` fails.
    """
    return _update_pending(
        session,
        message_id,
        fence,
        update(OutboxMessage).values(
            status="sent", sent_at=now, attempts=OutboxMessage.attempts + 1
        ),
    )


def defer(
    session: Session,
    message_id: int,
    *,
    until: datetime,
    error: str,
    fence: ColumnElement[bool] | None = None,
) -> bool:
    """Count a failed attempt and try again at ``until``.

    :returns: False, writing nothing, when the message is no longer pending or ``fence`` fails.
    """
    return _update_pending(
        session,
        message_id,
        fence,
        update(OutboxMessage).values(
            attempts=OutboxMessage.attempts + 1, last_error=error, next_attempt_at=until
        ),
    )


def give_up(
    session: Session,
    message_id: int,
    *,
    now: datetime,
    error: str,
    fence: ColumnElement[bool] | None = None,
) -> bool:
    """Mark a message undeliverable: retrying cannot help (Slack refused it for good).

    :returns: False, writing nothing, when the message is no longer pending or ``fence`` fails.
    """
    return _update_pending(
        session,
        message_id,
        fence,
        update(OutboxMessage).values(
            status="failed", attempts=OutboxMessage.attempts + 1, last_error=error, sent_at=now
        ),
    )


def _update_pending(
    session: Session,
    message_id: int,
    fence: ColumnElement[bool] | None,
    statement: Update,
) -> bool:
    statement = statement.where(OutboxMessage.id == message_id, OutboxMessage.status == "pending")
    if fence is not None:
        statement = statement.where(fence)
    result = session.execute(statement.execution_options(synchronize_session=False))
    return int(cast(CursorResult[Any], result).rowcount) == 1


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
