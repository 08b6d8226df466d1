"""Runs of reference suites: each case's answer, score and judge error, the run's scorer, and
the judge's scores kept by their cache key.

A reference case is answered in text and scored in [0, 1] (``exact``, ``token_f1`` or an LLM
``judge``), so its row has no expected tool, and its outcome is ``scored``, ``judge_error``
(answered, but the judge gave no usable score) or ``request_error``. ``judge_scores`` keeps
every score the judge gave, keyed by the sha256 of (judge configuration, case, answer), so an
answer is judged once: on the other build, in the next run, or in a run taken over after its
holder died before the run was stored.

Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0014"
down_revision: str | None = "0013"

_CALL_OUTCOMES = (
    "'correct', 'format', 'wrong_value', 'schema_violation', 'wrong_tool', 'no_call', "
    "'request_error'"
)
_OUTCOMES_BEFORE = f"outcome IN ({_CALL_OUTCOMES})"
_OUTCOMES_AFTER = f"outcome IN ({_CALL_OUTCOMES}, 'scored', 'judge_error')"
_SCORERS = "scorer IN ('exact', 'token_f1', 'judge')"
_REFERENCE_RUNS = "SELECT id FROM suite_runs WHERE scorer IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch:
        batch.add_column(sa.Column("scorer", sa.String(20), nullable=True))
        batch.create_check_constraint("ck_suite_runs_scorer", _SCORERS)
    with op.batch_alter_table("suite_case_results") as batch:
        batch.add_column(sa.Column("answer", sa.Text(), nullable=True))
        batch.add_column(sa.Column("score", sa.Double(), nullable=True))
        batch.add_column(sa.Column("judge_error", sa.Text(), nullable=True))
        batch.alter_column("expected_tool", existing_type=sa.String(200), nullable=True)
        batch.drop_constraint("ck_suite_case_results_outcome", type_="check")
        batch.create_check_constraint("ck_suite_case_results_outcome", _OUTCOMES_AFTER)
    op.create_table(
        "judge_scores",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        ddl.timestamp("judged_at"),
        ddl.primary_key("judge_scores", "key"),
    )


def downgrade() -> None:
    op.drop_table("judge_scores")
    # Before 0014 a run is a run of tool calls: runs of reference answers cannot be kept.
    op.execute(f"DELETE FROM suite_case_results WHERE run_id IN ({_REFERENCE_RUNS})")
    op.execute("DELETE FROM suite_runs WHERE scorer IS NOT NULL")
    with op.batch_alter_table("suite_case_results") as batch:
        batch.drop_constraint("ck_suite_case_results_outcome", type_="check")
        batch.create_check_constraint("ck_suite_case_results_outcome", _OUTCOMES_BEFORE)
        batch.alter_column("expected_tool", existing_type=sa.String(200), nullable=False)
        batch.drop_column("judge_error")
        batch.drop_column("score")
        batch.drop_column("answer")
    with op.batch_alter_table("suite_runs") as batch:
        batch.drop_constraint("ck_suite_runs_scorer", type_="check")
        batch.drop_column("scorer")
