"""The durable alert outbox.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=True),
        sa.Column("topic", sa.String(length=60), nullable=False),
        sa.Column("severity", sa.String(length=20), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("webhook_env", sa.String(length=100), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'sent', 'failed')", name="ck_alert_outbox_status"
        ),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_alert_outbox_rollout_id_rollouts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_alert_outbox"),
        sa.UniqueConstraint("key", name="uq_alert_outbox_key"),
    )
    op.create_index("ix_alert_outbox_status_created_at", "alert_outbox", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_alert_outbox_status_created_at", table_name="alert_outbox")
    op.drop_table("alert_outbox")
