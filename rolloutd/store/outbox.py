"""Reads and writes of the alert outbox (see :mod:`rolloutd.store.outbox_models`).

Enqueueing is keyed: the second insert of a key is a no-op that leaves the surrounding
transaction intact, so the transaction that records an event can add its alerts again on a
replay. The sender takes the oldest pending message of each webhook, so one channel's messages
arrive in order and one broken channel does not hold up the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
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


def heads_of_queues(session: Session, *, limit: int = 1000) -> list[OutboxMessage]:
    """The oldest pending message of each webhook (due or not), oldest first."""
    rows = session.scalars(
        select(OutboxMessage)
        .where(OutboxMessage.status == "pending")
        .order_by(OutboxMessage.created_at, OutboxMessage.id)
        .limit(limit)
    )
    heads: dict[str, OutboxMessage] = {}
    for row in rows:
        heads.setdefault(row.webhook_env, row)
    return list(heads.values())


def mark_sent(session: Session, message_id: int, *, now: datetime) -> None:
    """Slack accepted the message."""
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == message_id, OutboxMessage.status == "pending")
        .values(status="sent", sent_at=now, attempts=OutboxMessage.attempts + 1)
    )


def defer(session: Session, message_id: int, *, until: datetime, error: str) -> None:
    """Count a failed attempt and try again at ``until``."""
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == message_id, OutboxMessage.status == "pending")
        .values(
            attempts=OutboxMessage.attempts + 1,
            last_error=error,
            next_attempt_at=until,
        )
    )


def give_up(session: Session, message_id: int, *, now: datetime, error: str) -> None:
    """Mark a message undeliverable: retrying cannot help (Slack refused it for good)."""
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == message_id, OutboxMessage.status == "pending")
        .values(
            status="failed",
            attempts=OutboxMessage.attempts + 1,
            last_error=error,
            sent_at=now,
        )
    )


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
