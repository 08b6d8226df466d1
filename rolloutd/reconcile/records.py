"""Between the database rows and the state machine's plain data: what a tick reads and writes.

Rows become the machine's inputs (commands, the newest verdicts); evaluations and the
per-step table are written back in the decision's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from rolloutd.analysis.base import Evaluation
from rolloutd.core.actions import Command, GateResult, Verdict
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress
from rolloutd.store import queries
from rolloutd.store.models import Rollout


def command_of(row: Any) -> Command:
    """The machine's view of a command row."""
    return Command(
        id=row.id,
        kind=row.kind,
        actor=row.actor,
        reason=row.reason,
        full=bool((row.args or {}).get("full")),
    )


def record_evaluation(
    session: Session, rollout_id: int, step_index: int, evaluation: Evaluation
) -> None:
    """Store one evaluation with its evidence."""
    queries.record_evaluation(
        session,
        rollout_id=rollout_id,
        step_index=step_index,
        gate=evaluation.gate,
        role=evaluation.role,
        verdict=evaluation.verdict.value,
        value=evaluation.value,
        threshold=evaluation.threshold,
        query=evaluation.query,
        samples=evaluation.samples,
        statistic=evaluation.statistic,
        reason=evaluation.reason or None,
        evidence=evaluation.evidence,
        evaluated_at=evaluation.evaluated_at,
    )


def newest_verdicts(
    session: Session, rollout_id: int, plan: Plan, progress: Progress
) -> Mapping[str, GateResult]:
    """The newest verdict per gate: this step's for step gates, any step's for triggers."""
    at_step = queries.latest_evaluations(session, rollout_id, step_index=progress.step_index)
    overall = queries.latest_evaluations(session, rollout_id)
    results: dict[str, GateResult] = {}
    for gate in plan.rollback.triggers:
        if gate in overall:
            results[gate] = _result(overall[gate])
    for gate in plan.gates_of(progress.step_index):
        if gate in at_step:
            results[gate] = _result(at_step[gate])
    return results


def _result(row: Any) -> GateResult:
    return GateResult(
        verdict=Verdict(row.verdict),
        evaluated_at=row.evaluated_at,
        reason=row.reason or "",
        value=row.value,
        threshold=row.threshold,
        samples=row.samples,
    )


def record_steps(
    session: Session,
    rollout: Rollout,
    plan: Plan,
    before: Progress,
    after: Progress,
    now: datetime,
) -> None:
    """Keep the per-step table in step with the progress facts, for reports and history."""
    if after.started_at is None:
        return
    if after.step_index != before.step_index or after.ended == "completed":
        _step_row(session, rollout, plan, before.step_index, completed_at=now)
    _step_row(
        session,
        rollout,
        plan,
        after.step_index,
        entered_at=after.step_entered_at,
        verified_at=after.step_verified_at,
    )


def _step_row(
    session: Session,
    rollout: Rollout,
    plan: Plan,
    index: int,
    *,
    entered_at: datetime | None = None,
    verified_at: datetime | None = None,
    completed_at: datetime | None = None,
) -> None:
    step = plan.steps[index]
    queries.upsert_step(
        session,
        rollout_id=rollout.id,
        step_index=index,
        name=step.title(),
        kind=step.kind,
        weight=plan.step_weight(index),
        entered_at=entered_at,
        verified_at=verified_at,
        completed_at=completed_at,
    )
