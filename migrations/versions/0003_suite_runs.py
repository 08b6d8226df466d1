"""Tool-argument suite runs, cases and fields.

Create Date: 2026-12-02

Written by hand to match ``rolloutd.store.suite_models``; types are spelled out so that this
file keeps describing revision 0003 after the models move on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0003"
down_revision: str | None = "0002"

_CASE_OUTCOMES = (
    "'correct', 'format', 'wrong_value', 'schema_violation', 'wrong_tool', 'no_call', "
    "'request_error'"
)
_FIELD_OUTCOMES = "'correct', 'format', 'wrong_value', 'missing', 'extra'"


def upgrade() -> None:
    op.create_table(
        "suite_runs",
        ddl.id_column(),
        ddl.rollout_id(nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("gate", sa.String(200), nullable=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("suite_path", sa.Text(), nullable=False),
        sa.Column("suite_sha256", sa.String(64), nullable=False),
        sa.Column("endpoint", sa.Text(), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        ddl.timestamp("started_at"),
        ddl.timestamp("finished_at"),
        sa.Column("cases", sa.Integer(), nullable=False),
        sa.Column("measured", sa.Integer(), nullable=False),
        sa.Column("exact", sa.Integer(), nullable=False),
        sa.Column("strict_exact", sa.Integer(), nullable=False),
        sa.Column("schema_violations", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("request_errors", sa.Integer(), nullable=False),
        sa.Column("exactness", sa.Double(), nullable=True),
        sa.Column("strict_exactness", sa.Double(), nullable=True),
        sa.Column("outcomes", sa.JSON(), nullable=False),
        ddl.one_of("suite_runs", "role", ("canary", "baseline")),
        ddl.foreign_key("suite_runs", "rollout_id", "rollouts"),
        ddl.primary_key("suite_runs"),
    )
    op.create_index(
        "ix_suite_runs_rollout_id_gate_role_finished_at",
        "suite_runs",
        ["rollout_id", "gate", "role", "finished_at"],
    )

    op.create_table(
        "suite_case_results",
        ddl.id_column(),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("expected_tool", sa.String(200), nullable=False),
        sa.Column("tool", sa.String(200), nullable=True),
        sa.Column("outcome", sa.String(30), nullable=False),
        sa.Column("exact", sa.Boolean(), nullable=True),
        sa.Column("strict", sa.Boolean(), nullable=True),
        sa.Column("schema_valid", sa.Boolean(), nullable=True),
        sa.Column("arguments", sa.Text(), nullable=True),
        sa.Column("schema_errors", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("latency_s", sa.Double(), nullable=True),
        sa.CheckConstraint(f"outcome IN ({_CASE_OUTCOMES})", name="ck_suite_case_results_outcome"),
        ddl.foreign_key("suite_case_results", "run_id", "suite_runs"),
        ddl.primary_key("suite_case_results"),
        ddl.unique("suite_case_results", "run_id", "case_id"),
    )

    op.create_table(
        "suite_field_results",
        ddl.id_column(),
        sa.Column("case_result_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("field", sa.String(200), nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("schema_valid", sa.Boolean(), nullable=False),
        sa.Column("strict_correct", sa.Boolean(), nullable=False),
        sa.Column("expected", sa.Text(), nullable=True),
        sa.Column("actual", sa.Text(), nullable=True),
        sa.CheckConstraint(
            f"outcome IN ({_FIELD_OUTCOMES})", name="ck_suite_field_results_outcome"
        ),
        ddl.foreign_key("suite_field_results", "case_result_id", "suite_case_results"),
        ddl.foreign_key("suite_field_results", "run_id", "suite_runs"),
        ddl.primary_key("suite_field_results"),
    )
    op.create_index(
        "ix_suite_field_results_run_id_field", "suite_field_results", ["run_id", "field"]
    )


def downgrade() -> None:
    ddl.drop_table("suite_field_results", "ix_suite_field_results_run_id_field")
    ddl.drop_table("suite_case_results")
    ddl.drop_table("suite_runs", "ix_suite_runs_rollout_id_gate_role_finished_at")
