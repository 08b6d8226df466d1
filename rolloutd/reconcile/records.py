"""Between the database rows and the state machine's plain data: what a tick reads and writes.

Rows become the machine's inputs (commands, the newest verdicts); evaluations and the
per-step table are written back in the decision's transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.core.actions import Command, GateResult, Verdict
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress
from rolloutd.gates.base import Evaluation
from rolloutd.store import queries
from rolloutd.store.evaluations import GateRole

if TYPE_CHECKING:
    from rolloutd.reconcile.facts import Facts
    from rolloutd.store.types import Session


def command_of(row: Any) -> Command:
    """The machine's view of a command row."""
    return Command(
        id=row.id,
        kind=row.kind,
        actor=row.actor,
        db_role=row.db_role,
        reason=row.reason,
        full=bool((row.args or {}).get("full")),
    )


def evaluation_rows(facts: Facts, evaluations: list[Evaluation]) -> list[Any]:
    """The rows of a tick's evaluations with their evidence, each under the roles it served
    at the rollout's step (:func:`stored_role`)."""
    rollout_id, plan, step_index = facts.rollout.id, facts.plan, facts.progress.step_index
    rows: list[Any] = []
    for evaluation in evaluations:
        columns = {name: getattr(evaluation, name) for name in _EVALUATION_FIELDS}
        columns.update(
            verdict=evaluation.verdict.value,
            reason=evaluation.reason or None,
            role=stored_role(plan, step_index, evaluation),
        )
        rows.append({"rollout_id": rollout_id, "step_index": step_index, **columns})
    return rows


# An evaluation's fields, looked up once (``dataclasses.fields`` builds a tuple each call).
_EVALUATION_FIELDS = tuple(f.name for f in fields(Evaluation))


def stored_role(plan: Plan, step_index: int, evaluation: Evaluation) -> GateRole:
    """The roles ``evaluation`` served: a trigger that is also a gate of the step is judged
    once a tick, as a trigger, and that verdict decides the step too (``step+trigger``)."""
    if evaluation.role == "trigger" and evaluation.gate in plan.gates_of(step_index):
        return "step+trigger"
    return evaluation.role


@dataclass(frozen=True)
class Newest:
    """The newest verdict of each gate: in the current step, and of any step (triggers are
    judged in every step)."""

    at_step: Mapping[str, GateResult] = field(default_factory=dict)
    overall: Mapping[str, GateResult] = field(default_factory=dict)

    def with_fresh(self, evaluations: list[Evaluation]) -> Newest:
        """These verdicts with the tick's own evaluations over them (they are the newest)."""
        fresh = {e.gate: _result(e) for e in evaluations}
        return Newest({**self.at_step, **fresh}, {**self.overall, **fresh})

    def verdicts(self, plan: Plan, progress: Progress) -> Mapping[str, GateResult]:
        """What the machine judges by: this step's for step gates, any step's for triggers."""
        results = {g: self.overall[g] for g in plan.rollback.triggers if g in self.overall}
        for gate in plan.gates_of(progress.step_index):
            if gate in self.at_step:
                results[gate] = self.at_step[gate]
        return results


def newest_stored(session: Session, rollout_id: int, plan: Plan, progress: Progress) -> Newest:
    """The newest stored verdict of each gate the machine judges now: in the current step for
    its gates, of any step for the triggers."""
    step = progress.step_index
    wanted = [(g, step) for g in plan.gates_of(step)] + [(g, None) for g in plan.rollback.triggers]
    rows = sorted(
        queries.newest_evaluations(session, rollout_id, wanted),
        key=lambda row: (row.evaluated_at, row.id),
    )
    # Oldest first, so the newest of each gate is written last.
    return Newest(
        {row.gate: _result(row) for row in rows if row.step_index == step},
        {row.gate: _result(row) for row in rows},
    )


def _result(row: Any) -> GateResult:
    """The machine's view of a stored evaluation, or of one this tick made (as it will read
    back: an empty reason is stored as NULL)."""
    copied = {name: getattr(row, name) for name in _COPIED}
    return GateResult(verdict=Verdict(row.verdict), reason=row.reason or "", **copied)


# The fields of a GateResult that an evaluation holds as they are.
_COPIED = ("evaluated_at", "value", "threshold", "samples")


def record_steps(session: Session, facts: Facts, after: Progress, now: datetime) -> bool:
    """Keep the per-step table in step with the progress facts, for reports and history.

    A row that already holds every time given (as the tick read it) is not written again (a
    time once set is never moved).

    :returns: whether a row was written.
    """
    before = facts.progress
    if after.started_at is None:
        return False
    row = functools.partial(_step_row, session, facts)
    wrote = False
    if after.step_index != before.step_index or after.ended == "completed":
        wrote = row(before.step_index, completed_at=now)
    entered, verified = after.step_entered_at, after.step_verified_at
    return row(after.step_index, entered_at=entered, verified_at=verified) or wrote


def _step_row(session: Session, facts: Facts, index: int, **times: datetime | None) -> bool:
    known = facts.steps.get(index)
    if known is not None and all(
        getattr(known, name) is not None for name, value in times.items() if value is not None
    ):
        return False
    plan = facts.plan
    step = plan.steps[index]
    queries.upsert_step(
        session,
        rollout_id=facts.rollout.id,
        step_index=index,
        name=step.title(),
        kind=step.kind,
        weight=plan.step_weight(index),
        **times,
    )
    return True
