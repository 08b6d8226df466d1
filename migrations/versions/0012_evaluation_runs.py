"""Evaluation runs are objects of their own: named, resumable, and able to sample live traffic.

A suite job gets a deterministic ``name`` (``rollout-{id}/{gate}/step-{n}/run-{k}``), unique,
so two writers (or a retried tick) cannot create the same run twice; the jobs stored before
are named from their order in their step. A job may end ``cancelled`` (its rollout ended or
is rolling back). ``suite_job_cases`` keeps each case's result as it completes, so a run
taken over after its holder died continues where it stopped; ``suite_samples`` keeps the live
traffic a run sampled as its cases, so every attempt, on any host, asks the same ones.

Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0012"
down_revision: str | None = "0011"

_STATES_BEFORE = "state IN ('open', 'done', 'failed', 'superseded')"
_STATES_AFTER = "state IN ('open', 'done', 'failed', 'superseded', 'cancelled')"

# The k-th job of a gate in a step (by id) is its run k.
_NAME_EXISTING = sa.text(
    "UPDATE suite_jobs SET name = 'rollout-' || CAST(rollout_id AS TEXT) || '/' || gate"
    " || '/step-' || CAST(step_index AS TEXT) || '/run-' || CAST(("
    "SELECT count(*) FROM suite_jobs AS earlier WHERE earlier.rollout_id = suite_jobs.rollout_id"
    " AND earlier.gate = suite_jobs.gate AND earlier.step_index = suite_jobs.step_index"
    " AND earlier.id <= suite_jobs.id) AS TEXT)"
)


def upgrade() -> None:
    with op.batch_alter_table("suite_jobs") as batch:
        batch.add_column(sa.Column("name", sa.String(300), nullable=True))
    op.execute(_NAME_EXISTING)
    with op.batch_alter_table("suite_jobs") as batch:
        batch.alter_column("name", existing_type=sa.String(300), nullable=False)
        batch.create_unique_constraint("uq_suite_jobs_name", ["name"])
        batch.drop_constraint("ck_suite_jobs_state", type_="check")
        batch.create_check_constraint("ck_suite_jobs_state", _STATES_AFTER)
    op.create_table(
        "suite_job_cases",
        ddl.id_column(),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("suite_sha256", sa.String(64), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("case_id", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        ddl.timestamp("kept_at"),
        ddl.one_of("suite_job_cases", "role", ("canary", "baseline")),
        ddl.foreign_key("suite_job_cases", "job_id", "suite_jobs"),
        ddl.primary_key("suite_job_cases"),
        ddl.unique("suite_job_cases", "job_id", "suite_sha256", "role", "case_id"),
    )
    op.create_table(
        "suite_samples",
        ddl.id_column(),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("capture", sa.Text(), nullable=False),
        ddl.timestamp("since"),
        ddl.timestamp("until"),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("kept", sa.Integer(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("suite_sha256", sa.String(64), nullable=True),
        sa.Column("suite", sa.LargeBinary(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        ddl.timestamp("sampled_at"),
        ddl.foreign_key("suite_samples", "job_id", "suite_jobs"),
        ddl.primary_key("suite_samples"),
        ddl.unique("suite_samples", "job_id"),
    )


def downgrade() -> None:
    op.drop_table("suite_samples")
    op.drop_table("suite_job_cases")
    op.execute("UPDATE suite_jobs SET state = 'superseded' WHERE state = 'cancelled'")
    with op.batch_alter_table("suite_jobs") as batch:
        batch.drop_constraint("ck_suite_jobs_state", type_="check")
        batch.create_check_constraint("ck_suite_jobs_state", _STATES_BEFORE)
        batch.drop_constraint("uq_suite_jobs_name", type_="unique")
        batch.drop_column("name")
