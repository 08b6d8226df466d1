"""Each rollout keeps how many steps its plan has, so a view says "step 2 of 6" unparsed.

``rolloutctl list`` shows ended rollouts without parsing their plans (a parse costs more than
the rest of the row); the count is a fact of the plan the rollout started with, like its hash.
Rollouts stored before get it from their stored plan text.

Create Date: 2026-12-04
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
import yaml
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("steps", sa.Integer(), nullable=True))
    connection = op.get_bind()
    count = sa.text("UPDATE rollouts SET steps = :steps WHERE id = :id")
    for rollout_id, source in connection.execute(sa.text("SELECT id, plan_source FROM rollouts")):
        connection.execute(count, {"id": rollout_id, "steps": _steps_in(source)})
    with op.batch_alter_table("rollouts") as batch:
        batch.alter_column("steps", existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("steps")


def _steps_in(source: str) -> int:
    """How many steps the plan text lists (every stored plan lists at least one: it passed its
    checks to start); 0 for a text that is no plan."""
    try:
        plan: Any = yaml.safe_load(source)
    except yaml.YAMLError:
        return 0
    steps = plan.get("steps") if isinstance(plan, dict) else None
    return len(steps) if isinstance(steps, list) else 0
