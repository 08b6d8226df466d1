"""Initial schema.

Rollouts, their steps, gate evaluations, commands, events, actions and pinned artefact sets.

Revision ID: 0001
Revises:
Create Date: 2025-12-02

Written by hand to match ``rolloutd.store.models`` (``alembic check`` proves it on Postgres and
SQLite). Types are spelled out here rather than imported from the models, so this file keeps
describing revision 0001 after the models move on.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def _rollout_fk(*, nullable: bool = False) -> sa.Column[int]:
    return sa.Column("rollout_id", sa.Integer(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "rollouts",
        _id(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("environment", sa.String(100), nullable=False),
        sa.Column("state", sa.String(40), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("plan_hash", sa.String(64), nullable=False),
        sa.Column("plan_source", sa.Text(), nullable=False),
        sa.Column("plan_path", sa.Text(), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_rollouts"),
    )
    op.create_index("ix_rollouts_state", "rollouts", ["state"])
    op.create_index(
        "uq_rollouts_active_service_environment",
        "rollouts",
        ["service", "environment"],
        unique=True,
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )

    op.create_table(
        "step_progress",
        _rollout_fk(),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        _timestamp("entered_at", nullable=True),
        _timestamp("verified_at", nullable=True),
        _timestamp("completed_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_step_progress_rollout_id_rollouts"
        ),
        sa.PrimaryKeyConstraint("rollout_id", "step_index", name="pk_step_progress"),
    )

    op.create_table(
        "gate_evaluations",
        _id(),
        _rollout_fk(),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("gate", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("verdict", sa.String(40), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("threshold", sa.String(200), nullable=True),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=True),
        sa.Column("statistic", sa.Double(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        _timestamp("evaluated_at"),
        sa.CheckConstraint("role IN ('step', 'trigger')", name="ck_gate_evaluations_role"),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_gate_evaluations_rollout_id_rollouts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_gate_evaluations"),
    )
    op.create_index(
        "ix_gate_evaluations_rollout_id_gate_evaluated_at",
        "gate_evaluations",
        ["rollout_id", "gate", "evaluated_at"],
    )

    op.create_table(
        "commands",
        _id(),
        _rollout_fk(),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        _timestamp("created_at"),
        sa.Column("status", sa.String(20), nullable=False),
        _timestamp("handled_at", nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "kind IN ('promote', 'abort', 'pause', 'resume')", name="ck_commands_kind"
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'applied', 'rejected')", name="ck_commands_status"
        ),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_commands_rollout_id_rollouts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_commands"),
    )
    op.create_index("ix_commands_rollout_id_status", "commands", ["rollout_id", "status"])

    op.create_table(
        "events",
        _id(),
        _rollout_fk(nullable=True),
        _timestamp("at"),
        sa.Column("kind", sa.String(60), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("dedup_key", sa.String(200), nullable=True),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_events_rollout_id_rollouts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.UniqueConstraint("rollout_id", "dedup_key", name="uq_events_rollout_id_dedup_key"),
    )
    op.create_index("ix_events_rollout_id_at", "events", ["rollout_id", "at"])
    op.create_index(
        "uq_events_daemon_dedup_key",
        "events",
        ["dedup_key"],
        unique=True,
        postgresql_where=sa.text("rollout_id IS NULL"),
        sqlite_where=sa.text("rollout_id IS NULL"),
    )

    op.create_table(
        "actions",
        _id(),
        _rollout_fk(),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(60), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        _timestamp("created_at"),
        _timestamp("done_at", nullable=True),
        sa.CheckConstraint("status IN ('pending', 'done', 'failed')", name="ck_actions_status"),
        sa.ForeignKeyConstraint(
            ["rollout_id"], ["rollouts.id"], name="fk_actions_rollout_id_rollouts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_actions"),
        sa.UniqueConstraint("rollout_id", "key", name="uq_actions_rollout_id_key"),
    )
    op.create_index("ix_actions_status_created_at", "actions", ["status", "created_at"])

    op.create_table(
        "artefact_sets",
        _id(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("engine", sa.String(20), nullable=False),
        sa.Column("engine_config", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("root", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        _timestamp("created_at"),
        sa.CheckConstraint("engine IN ('trtllm', 'vllm')", name="ck_artefact_sets_engine"),
        sa.PrimaryKeyConstraint("id", name="pk_artefact_sets"),
        sa.UniqueConstraint("name", name="uq_artefact_sets_name"),
    )


def downgrade() -> None:
    op.drop_table("artefact_sets")
    op.drop_index("ix_actions_status_created_at", table_name="actions")
    op.drop_table("actions")
    op.drop_index("uq_events_daemon_dedup_key", table_name="events")
    op.drop_index("ix_events_rollout_id_at", table_name="events")
    op.drop_table("events")
    op.drop_index("ix_commands_rollout_id_status", table_name="commands")
    op.drop_table("commands")
    op.drop_index("ix_gate_evaluations_rollout_id_gate_evaluated_at", table_name="gate_evaluations")
    op.drop_table("gate_evaluations")
    op.drop_table("step_progress")
    op.drop_index("uq_rollouts_active_service_environment", table_name="rollouts")
    op.drop_index("ix_rollouts_state", table_name="rollouts")
    op.drop_table("rollouts")
