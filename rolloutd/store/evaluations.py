"""Gate evaluations: every verdict the analysis produced, with the evidence behind it.

The state machine asks for the newest verdict of each gate; trend checks ask for a gate's recent
values. Both read an index on ``(rollout_id, gate, evaluated_at)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypedDict, Unpack

from sqlalchemy import Select, bindparam, func, insert, select
from sqlalchemy.orm import Session

from rolloutd.store.models import GateEvaluation
from rolloutd.store.writes import add_row

GateRole = Literal["step", "trigger", "step+trigger"]
"""What an evaluation was for (``rolloutd.store.models.GATE_ROLES``); :func:`roles_of` splits it."""


def roles_of(role: str) -> list[str]:
    """The roles a stored ``role`` names: ``step+trigger`` is both."""
    return role.split("+")


class NewEvaluation(TypedDict):
    """One verdict of one gate at one step, with the measurement and evidence behind it."""

    rollout_id: int
    step_index: int
    gate: str
    role: GateRole
    verdict: str
    value: float | None
    threshold: str | None
    query: str | None
    samples: int | None
    statistic: float | None
    reason: str | None
    evidence: dict[str, Any]
    evaluated_at: datetime


def record_evaluation(session: Session, **evaluation: Unpack[NewEvaluation]) -> int:
    """Store one gate verdict and return its id."""
    return add_row(session, GateEvaluation(**evaluation)).id


def record_evaluations(session: Session, evaluations: Sequence[NewEvaluation]) -> None:
    """Store a tick's verdicts in one statement."""
    if evaluations:
        session.execute(insert(GateEvaluation), list(evaluations))


class Newest(NamedTuple):
    """What the state machine reads of a gate's newest evaluation."""

    id: int
    gate: str
    step_index: int
    verdict: str
    evaluated_at: datetime
    reason: str | None
    value: float | None
    threshold: str | None
    samples: int | None


def newest_evaluations(
    session: Session, rollout_id: int, wanted: Iterable[tuple[str, int | None]]
) -> list[Newest]:
    """The newest evaluation of each ``(gate, step)`` wanted (step None: of any step), in one
    statement of one index lookup a gate, however many evaluations the rollout has."""
    wanted = list(wanted)
    if not wanted:
        return []
    params: dict[str, Any] = {"rollout_id": rollout_id}
    for i, (gate, step) in enumerate(wanted):
        params[f"gate_{i}"] = gate
        if step is not None:
            params[f"step_{i}"] = step
    statement = _newest_statement(tuple(step is not None for _, step in wanted))
    return [Newest(*row) for row in session.execute(statement, params)]


@lru_cache(maxsize=256)
def _newest_statement(by_step: tuple[bool, ...]) -> Select[Any]:
    """The statement for ``newest_evaluations``, built once per shape (ticks ask the same
    gates every time): building SQLAlchemy expressions costs more than running them."""
    newest_first = (GateEvaluation.evaluated_at.desc(), GateEvaluation.id.desc())
    ids = []
    for i, step in enumerate(by_step):
        query = select(GateEvaluation.id).where(
            GateEvaluation.rollout_id == bindparam("rollout_id"),
            GateEvaluation.gate == bindparam(f"gate_{i}"),
        )
        if step:
            query = query.where(GateEvaluation.step_index == bindparam(f"step_{i}"))
        ids.append(query.order_by(*newest_first).limit(1).scalar_subquery())
    columns = [getattr(GateEvaluation, name) for name in Newest._fields]
    return select(*columns).where(GateEvaluation.id.in_(ids))


def latest_evaluations(
    session: Session,
    rollout_id: int,
    *,
    step_index: int | None = None,
    gates: Iterable[str] | None = None,
) -> dict[str, GateEvaluation]:
    """Return the newest evaluation of each gate of the rollout, by gate name.

    With ``step_index``, only evaluations made during that step count. With ``gates`` (the
    plan's), one index lookup a gate; without, every evaluation of the rollout is ranked,
    which only one-off reads may afford (a 48 h bake stores some 200,000).
    """
    if gates is not None:
        found = newest_evaluations(session, rollout_id, [(g, step_index) for g in gates])
        if not found:
            return {}
        chosen = select(GateEvaluation).where(GateEvaluation.id.in_([row.id for row in found]))
        return {row.gate: row for row in session.scalars(chosen)}
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
