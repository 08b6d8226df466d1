"""Suite runs become keyed, leased jobs, so a run is fenced, cancellable and taken over once.

A job row is written by the leader when a suite gate is due; the instance that runs it holds
it (``acquired_by``, ``acquired_until``) and moves ``acquired_until`` forward under the leader
lease while its requests are in flight. A new leader claims an open job once the holder's
``acquired_until`` has passed. At most one job per rollout and gate is open (a partial unique
index). Stored runs name the job they belong to.

Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0008"
down_revision: str | None = "0007"

_OPEN = sa.text("state = 'open'")


def upgrade() -> None:
    op.create_table(
        "suite_jobs",
        ddl.id_column(),
        ddl.rollout_id(),
        sa.Column("gate", sa.String(200), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        ddl.timestamp("due_at"),
        sa.Column("acquired_by", sa.String(200), nullable=True),
        ddl.timestamp("acquired_until", nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        ddl.timestamp("finished_at", nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        ddl.one_of("suite_jobs", "state", ("open", "done", "failed", "superseded")),
        ddl.foreign_key("suite_jobs", "rollout_id", "rollouts"),
        ddl.primary_key("suite_jobs"),
    )
    op.create_index(
        "uq_suite_jobs_open",
        "suite_jobs",
        ["rollout_id", "gate"],
        unique=True,
        postgresql_where=_OPEN,
        sqlite_where=_OPEN,
    )
    op.create_index(
        "ix_suite_jobs_rollout_id_gate_step_index",
        "suite_jobs",
        ["rollout_id", "gate", "step_index"],
    )
    with op.batch_alter_table("suite_runs") as batch:
        batch.add_column(sa.Column("job_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            "fk_suite_runs_job_id_suite_jobs", "suite_jobs", ["job_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch:
        batch.drop_constraint("fk_suite_runs_job_id_suite_jobs", type_="foreignkey")
        batch.drop_column("job_id")
    ddl.drop_table("suite_jobs", "ix_suite_jobs_rollout_id_gate_step_index", "uq_suite_jobs_open")
