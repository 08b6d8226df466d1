"""The alert outbox: alerts written with their event, delivered by the sender.

A row is one Slack message to one channel. It is inserted in the transaction that records
what caused it, under a unique ``key``, so a replayed tick adds nothing; the sender marks it
sent only after Slack said ``ok``, so a crash in between repeats a message but never loses
one. The row names the environment variable that holds the webhook URL, never the URL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from rolloutd.store.models import Base, PrimaryKey, RolloutRef, one_of

OUTBOX_STATUSES = ("pending", "sent", "failed")


class OutboxMessage(Base):
    """One alert for one Slack channel, pending until delivered or given up."""

    __tablename__ = "alert_outbox"
    __table_args__ = (
        Index(None, "status", "created_at"),
        one_of("status", OUTBOX_STATUSES),
    )

    id: Mapped[PrimaryKey]
    key: Mapped[str] = mapped_column(String(300), unique=True)
    rollout_id: Mapped[RolloutRef | None]
    topic: Mapped[str] = mapped_column(String(60))
    severity: Mapped[str] = mapped_column(String(20))
    channel: Mapped[str] = mapped_column(String(100))
    webhook_env: Mapped[str] = mapped_column(String(100))
    message: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(20))
    attempts: Mapped[int]
    last_error: Mapped[str | None]
    created_at: Mapped[datetime]
    next_attempt_at: Mapped[datetime]
    sent_at: Mapped[datetime | None]
