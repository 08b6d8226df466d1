"""Weight changes become a journal of attempts toward a desired fact: an attempt replaced
by a newer desired weight is recorded as ``superseded`` and never performed.

The desired facts themselves live in the rollout's progress JSON; progress written before
this revision has none, and the state machine derives them from the step (or rollback) the
rollout is in on its next tick, so rollouts in flight carry on across the upgrade. Their
pending weight actions, keyed the old way, are superseded by the first tick.

Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"

_BEFORE = "status IN ('pending', 'done', 'failed')"
_AFTER = "status IN ('pending', 'done', 'failed', 'superseded')"


def upgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_constraint("ck_actions_status", type_="check")
        batch.create_check_constraint("ck_actions_status", _AFTER)


def downgrade() -> None:
    op.execute("UPDATE actions SET status = 'failed' WHERE status = 'superseded'")
    with op.batch_alter_table("actions") as batch:
        batch.drop_constraint("ck_actions_status", type_="check")
        batch.create_check_constraint("ck_actions_status", _BEFORE)
