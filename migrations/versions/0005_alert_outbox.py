"""The durable alert outbox.

Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0005"
down_revision: str | None = "0004"


def upgrade() -> None:
    op.create_table(
        "alert_outbox",
        ddl.id_column(),
        sa.Column("key", sa.String(length=300), nullable=False),
        ddl.rollout_id(nullable=True),
        sa.Column("topic", sa.String(length=60), nullable=False),
        sa.Column("severity", sa.String(length=20), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("webhook_env", sa.String(length=100), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        ddl.timestamp("created_at"),
        ddl.timestamp("next_attempt_at"),
        ddl.timestamp("sent_at", nullable=True),
        ddl.one_of("alert_outbox", "status", ("pending", "sent", "failed")),
        ddl.foreign_key("alert_outbox", "rollout_id", "rollouts"),
        ddl.primary_key("alert_outbox"),
        ddl.unique("alert_outbox", "key"),
    )
    op.create_index("ix_alert_outbox_status_created_at", "alert_outbox", ["status", "created_at"])


def downgrade() -> None:
    ddl.drop_table("alert_outbox", "ix_alert_outbox_status_created_at")
