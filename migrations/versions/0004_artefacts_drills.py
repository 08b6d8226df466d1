"""Staging drills, deploy records, and when a failing action may be tried again.

Create Date: 2026-12-02

Written by hand to match ``rolloutd.store.artefact_models``; types are spelled out so this
file keeps describing revision 0004 after the models move on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0004"
down_revision: str | None = "0003"


def upgrade() -> None:
    op.create_table(
        "drills",
        ddl.id_column(),
        sa.Column("plan_name", sa.String(200), nullable=False),
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("environment", sa.String(100), nullable=False),
        sa.Column("stable_set", sa.String(200), nullable=False),
        sa.Column("canary_set", sa.String(200), nullable=False),
        sa.Column("stable_digest", sa.String(64), nullable=False),
        sa.Column("canary_digest", sa.String(64), nullable=False),
        sa.Column("result", sa.String(20), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        ddl.timestamp("started_at"),
        ddl.timestamp("finished_at", nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        ddl.one_of("drills", "result", ("running", "passed", "failed")),
        ddl.primary_key("drills"),
    )
    op.create_index(
        "ix_drills_stable_digest_canary_digest_environment_result",
        "drills",
        ["stable_digest", "canary_digest", "environment", "result"],
    )

    op.create_table(
        "deploy_records",
        ddl.id_column(),
        ddl.rollout_id(nullable=True),
        sa.Column("drill_id", sa.Integer(), nullable=True),
        sa.Column("replica", sa.String(200), nullable=False),
        sa.Column("set_name", sa.String(200), nullable=False),
        sa.Column("set_digest", sa.String(64), nullable=False),
        sa.Column("executor", sa.String(40), nullable=False),
        sa.Column("step", sa.String(40), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        ddl.timestamp("started_at"),
        sa.Column("detail", sa.JSON(), nullable=False),
        ddl.foreign_key("deploy_records", "rollout_id", "rollouts"),
        ddl.foreign_key("deploy_records", "drill_id", "drills"),
        ddl.primary_key("deploy_records"),
    )
    op.create_index(
        "ix_deploy_records_rollout_id_started_at", "deploy_records", ["rollout_id", "started_at"]
    )
    op.create_index("ix_deploy_records_drill_id", "deploy_records", ["drill_id"])

    # Backoff for actions that keep failing (a redeploy of an unhealthy replica).
    op.add_column("actions", ddl.timestamp("next_attempt_at", nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("next_attempt_at")
    ddl.drop_table(
        "deploy_records", "ix_deploy_records_drill_id", "ix_deploy_records_rollout_id_started_at"
    )
    ddl.drop_table("drills", "ix_drills_stable_digest_canary_digest_environment_result")
