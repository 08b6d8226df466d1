"""Each rollout keeps its plan's outline, so status and list show it without the plan.

What ``rolloutctl status`` shows of a plan (its steps' titles, weights and bakes, which gates
each step waits on, the rollback triggers) is derived once, when the rollout starts, and
stored beside the plan's text (:mod:`rolloutd.core.outline`): building the plan model to
derive it again took longer than the rest of the command. Rollouts stored before have none;
the views derive theirs from the stored plan, as they did before.

Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("plan_outline", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("plan_outline")
