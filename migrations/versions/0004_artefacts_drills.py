"""Staging drills, deploy records, and when a failing action may be tried again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

Written by hand to match ``rolloutd.store.artefact_models``; types are spelled out so this
file keeps describing revision 0004 after the models move on.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "drills",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("plan_name", sa.String(200), nullable=False),
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("environment", sa.String(100), nullable=False),
        sa.Column("stable_set", sa.String(200), nullable=False),
        sa.Column("canary_set", sa.String(200), nullable=False),
        sa.Column("stable_digest", sa.String(64), nullable=False),
        sa.Column("canary_digest", sa.String(64), nullable=False),
        sa.Column("result", sa.String(20), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        _timestamp("started_at"),
        _timestamp("finished_at", nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.CheckConstraint("result IN ('running', 'passed', 'failed')", name="ck_drills_result"),
        sa.PrimaryKeyConstraint("id", name="pk_drills"),
    )
    op.create_index(
        "ix_drills_stable_digest_canary_digest_environment_result",
        "drills",
        ["stable_digest", "canary_digest", "environment", "result"],
    )

    op.create_table(
        "deploy_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=True),
        sa.Column("drill_id", sa.Integer(), nullable=True),
        sa.Column("replica", sa.String(200), nullable=False),
        sa.Column("set_name", sa.String(200), nullable=False),
        sa.Column("set_digest", sa.String(64), nullable=False),
        sa.Column("executor", sa.String(40), nullable=False),
        sa.Column("step", sa.String(40), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        _timestamp("started_at"),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_deploy_records_rollout_id_rollouts"
        ),
        sa.ForeignKeyConstraint(
            ["drill_id"], ["drills.id"], name="fk_deploy_records_drill_id_drills"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_deploy_records"),
    )
    op.create_index(
        "ix_deploy_records_rollout_id_started_at", "deploy_records", ["rollout_id", "started_at"]
    )
    op.create_index("ix_deploy_records_drill_id", "deploy_records", ["drill_id"])

    # Backoff for actions that keep failing (a redeploy of an unhealthy replica).
    op.add_column("actions", _timestamp("next_attempt_at", nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("next_attempt_at")
    op.drop_index("ix_deploy_records_drill_id", table_name="deploy_records")
    op.drop_index("ix_deploy_records_rollout_id_started_at", table_name="deploy_records")
    op.drop_table("deploy_records")
    op.drop_index("ix_drills_stable_digest_canary_digest_environment_result", table_name="drills")
    op.drop_table("drills")
