"""Gate evaluations: every verdict the analysis produced, with the evidence behind it.

The state machine asks for the newest verdict of each gate; trend checks ask for a gate's recent
values. Both read an index on ``(rollout_id, gate, evaluated_at)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rolloutd.store.models import GateEvaluation

GateRole = Literal["step", "trigger"]


def record_evaluation(
    session: Session,
    *,
    rollout_id: int,
    step_index: int,
    gate: str,
    role: GateRole,
    verdict: str,
    value: float | None,
    threshold: str | None,
    query: str | None,
    samples: int | None,
    statistic: float | None,
    reason: str | None,
    evidence: dict[str, Any],
    evaluated_at: datetime,
) -> int:
    """Store one gate verdict and return its id."""
    evaluation = GateEvaluation(
        rollout_id=rollout_id,
        step_index=step_index,
        gate=gate,
        role=role,
        verdict=verdict,
        value=value,
        threshold=threshold,
        query=query,
        samples=samples,
        statistic=statistic,
        reason=reason,
        evidence=evidence,
        evaluated_at=evaluated_at,
    )
    session.add(evaluation)
    session.flush()
    return evaluation.id


def latest_evaluations(
    session: Session, rollout_id: int, *, step_index: int | None = None
) -> dict[str, GateEvaluation]:
    """Return the newest evaluation of each gate of the rollout, by gate name.

    With ``step_index``, only evaluations made during that step count.
    """
    newest_first = (GateEvaluation.evaluated_at.desc(), GateEvaluation.id.desc())
    ranked = select(
        GateEvaluation.id,
        func.row_number()
        .over(partition_by=GateEvaluation.gate, order_by=newest_first)
        .label("rank"),
    ).where(GateEvaluation.rollout_id == rollout_id)
    if step_index is not None:
        ranked = ranked.where(GateEvaluation.step_index == step_index)
    newest = ranked.subquery()
    rows = session.scalars(
        select(GateEvaluation)
        .join(newest, GateEvaluation.id == newest.c.id)
        .where(newest.c.rank == 1)
    )
    return {row.gate: row for row in rows}


def recent_values(session: Session, rollout_id: int, gate: str, limit: int) -> list[float | None]:
    """Return the values of the gate's ``limit`` most recent evaluations, newest first.

    None stands for an evaluation that produced no value (an inconclusive query).
    """
    return list(
        session.scalars(
            select(GateEvaluation.value)
            .where(GateEvaluation.rollout_id == rollout_id, GateEvaluation.gate == gate)
            .order_by(GateEvaluation.evaluated_at.desc(), GateEvaluation.id.desc())
            .limit(limit)
        )
    )
