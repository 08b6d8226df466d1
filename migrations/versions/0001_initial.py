"""Initial schema.

Rollouts, their steps, gate evaluations, commands, events, actions and pinned artefact sets.

Create Date: 2025-12-02

Written by hand to match ``rolloutd.store.models`` (``alembic check`` proves it on Postgres and
SQLite). Types are spelled out here rather than imported from the models, so this file keeps
describing revision 0001 after the models move on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0001"
down_revision: str | None = None


def upgrade() -> None:
    op.create_table(
        "rollouts",
        ddl.id_column(),
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
        ddl.timestamp("created_at"),
        ddl.timestamp("updated_at"),
        ddl.primary_key("rollouts"),
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
        ddl.rollout_id(),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        ddl.timestamp("entered_at", nullable=True),
        ddl.timestamp("verified_at", nullable=True),
        ddl.timestamp("completed_at", nullable=True),
        ddl.foreign_key("step_progress", "rollout_id", "rollouts"),
        ddl.primary_key("step_progress", "rollout_id", "step_index"),
    )

    op.create_table(
        "gate_evaluations",
        ddl.id_column(),
        ddl.rollout_id(),
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
        ddl.timestamp("evaluated_at"),
        ddl.one_of("gate_evaluations", "role", ("step", "trigger")),
        ddl.foreign_key("gate_evaluations", "rollout_id", "rollouts"),
        ddl.primary_key("gate_evaluations"),
    )
    op.create_index(
        "ix_gate_evaluations_rollout_id_gate_evaluated_at",
        "gate_evaluations",
        ["rollout_id", "gate", "evaluated_at"],
    )

    op.create_table(
        "commands",
        ddl.id_column(),
        ddl.rollout_id(),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        ddl.timestamp("created_at"),
        sa.Column("status", sa.String(20), nullable=False),
        ddl.timestamp("handled_at", nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        ddl.one_of("commands", "kind", ("promote", "abort", "pause", "resume")),
        ddl.one_of("commands", "status", ("pending", "applied", "rejected")),
        ddl.foreign_key("commands", "rollout_id", "rollouts"),
        ddl.primary_key("commands"),
    )
    op.create_index("ix_commands_rollout_id_status", "commands", ["rollout_id", "status"])

    op.create_table(
        "events",
        ddl.id_column(),
        ddl.rollout_id(nullable=True),
        ddl.timestamp("at"),
        sa.Column("kind", sa.String(60), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("dedup_key", sa.String(200), nullable=True),
        ddl.foreign_key("events", "rollout_id", "rollouts"),
        ddl.primary_key("events"),
        ddl.unique("events", "rollout_id", "dedup_key"),
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
        ddl.id_column(),
        ddl.rollout_id(),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(60), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        ddl.timestamp("created_at"),
        ddl.timestamp("done_at", nullable=True),
        ddl.one_of("actions", "status", ("pending", "done", "failed")),
        ddl.foreign_key("actions", "rollout_id", "rollouts"),
        ddl.primary_key("actions"),
        ddl.unique("actions", "rollout_id", "key"),
    )
    op.create_index("ix_actions_status_created_at", "actions", ["status", "created_at"])

    op.create_table(
        "artefact_sets",
        ddl.id_column(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("engine", sa.String(20), nullable=False),
        sa.Column("engine_config", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("root", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        ddl.timestamp("created_at"),
        ddl.one_of("artefact_sets", "engine", ("trtllm", "vllm")),
        ddl.primary_key("artefact_sets"),
        ddl.unique("artefact_sets", "name"),
    )


def downgrade() -> None:
    ddl.drop_table("artefact_sets")
    ddl.drop_table("actions", "ix_actions_status_created_at")
    ddl.drop_table("events", "uq_events_daemon_dedup_key", "ix_events_rollout_id_at")
    ddl.drop_table("commands", "ix_commands_rollout_id_status")
    ddl.drop_table("gate_evaluations", "ix_gate_evaluations_rollout_id_gate_evaluated_at")
    ddl.drop_table("step_progress")
    ddl.drop_table("rollouts", "uq_rollouts_active_service_environment", "ix_rollouts_state")
