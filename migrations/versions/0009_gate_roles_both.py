"""A gate evaluation may serve both roles: ``step+trigger``.

A gate of the current step that is also a rollback trigger is judged once a tick, and that
one verdict decides both whether the step may complete and whether to roll back. It was
stored as ``trigger`` alone; it is stored as ``step+trigger`` now, and the evaluations stored
before are relabelled from each rollout's own plan (the steps that listed the gate).

Create Date: 2026-12-04
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
import yaml
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"

_BEFORE = "role IN ('step', 'trigger')"
_AFTER = "role IN ('step', 'trigger', 'step+trigger')"


def upgrade() -> None:
    with op.batch_alter_table("gate_evaluations") as batch:
        batch.drop_constraint("ck_gate_evaluations_role", type_="check")
        batch.create_check_constraint("ck_gate_evaluations_role", _AFTER)
    connection = op.get_bind()
    relabel = sa.text(
        "UPDATE gate_evaluations SET role = 'step+trigger' WHERE rollout_id = :rollout "
        "AND step_index = :step AND gate = :gate AND role = 'trigger'"
    )
    for rollout_id, source in connection.execute(sa.text("SELECT id, plan_source FROM rollouts")):
        for step, gate in _both(source):
            connection.execute(relabel, {"rollout": rollout_id, "step": step, "gate": gate})


def downgrade() -> None:
    op.execute("UPDATE gate_evaluations SET role = 'trigger' WHERE role = 'step+trigger'")
    with op.batch_alter_table("gate_evaluations") as batch:
        batch.drop_constraint("ck_gate_evaluations_role", type_="check")
        batch.create_check_constraint("ck_gate_evaluations_role", _BEFORE)


def _both(source: str) -> list[tuple[int, str]]:
    """(step index, gate) for every step gate of the plan text that is also a trigger; none
    for a text that is no plan (every stored plan is one: it passed its checks to start)."""
    try:
        plan: Any = yaml.safe_load(source)
    except yaml.YAMLError:
        return []
    if not isinstance(plan, dict):
        return []
    triggers = set((plan.get("rollback") or {}).get("triggers") or ())
    return [
        (index, gate)
        for index, step in enumerate(plan.get("steps") or ())
        for gate in (step or {}).get("gates") or ()
        if gate in triggers
    ]
