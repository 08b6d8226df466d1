"""What the rollout page and the report read, each in one statement.

Evaluations are read with Core over their table's columns: the ORM's per-row work shows at
the 200,000 rows of a 48 h bake. Which of them a chart keeps is decided in
:mod:`rolloutd.web.data`; these verbs only fetch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, Row, cast, extract, func, select
from sqlalchemy.orm import Session

from rolloutd.store.artefact_models import Drill
from rolloutd.store.models import ArtefactSet, Event, GateEvaluation, Rollout
from rolloutd.store.suite_models import SuiteFieldResult, SuiteRun

_EV = GateEvaluation.__table__.c
# Ids asked for in one IN list, at most.
_IN_CHUNK = 900


def page_version(session: Session, rollout_id: int) -> tuple[int | None, int, int]:
    """(revision, newest evaluation id, newest event id) of the rollout; revision None when
    there is no such rollout."""
    newest_evaluation = session.scalar(
        select(func.max(GateEvaluation.id)).where(GateEvaluation.rollout_id == rollout_id)
    )
    newest_event = session.scalar(select(func.max(Event.id)).where(Event.rollout_id == rollout_id))
    revision = session.scalar(select(Rollout.revision).where(Rollout.id == rollout_id))
    return revision, newest_evaluation or 0, newest_event or 0


def rollouts_version(session: Session) -> tuple[int, datetime | None]:
    """(how many rollouts, when one was last written)."""
    count, newest = session.execute(
        select(func.count(Rollout.id), func.max(Rollout.updated_at))
    ).one()
    return int(count), newest


def all_rollouts(session: Session) -> list[Rollout]:
    """Every rollout, newest first."""
    return list(session.scalars(select(Rollout).order_by(Rollout.id.desc())))


def events_of_kinds(session: Session, rollout_id: int, kinds: Iterable[str]) -> list[Row[Any]]:
    """The rollout's events of ``kinds`` as rows of ``at``, ``kind`` and ``data``, oldest first."""
    query = select(Event.at, Event.kind, Event.data).where(
        Event.rollout_id == rollout_id, Event.kind.in_(list(kinds))
    )
    return list(session.execute(query.order_by(Event.at)))


def evaluation_spans(
    session: Session, rollout_id: int
) -> list[tuple[str, str, int, datetime, datetime, int]]:
    """Per gate and stored role: (gate, role, count, first, last, newest id), in one
    aggregate."""
    query = (
        select(_EV.gate, _EV.role, func.count(), func.min(_EV.evaluated_at))
        .add_columns(func.max(_EV.evaluated_at), func.max(_EV.id))
        .where(_EV.rollout_id == rollout_id)
        .group_by(_EV.gate, _EV.role)
    )
    return [tuple(row) for row in session.connection().execute(query)]


def evaluation_verdicts(session: Session, rollout_id: int, gate: str) -> list[tuple[int, int, str]]:
    """(id, step, verdict) of each of the gate's evaluations, in the order they were made:
    three narrow columns, in the index's order."""
    query = select(_EV.id, _EV.step_index, _EV.verdict).where(
        _EV.rollout_id == rollout_id, _EV.gate == gate
    )
    rows = session.connection().execute(query.order_by(_EV.evaluated_at, _EV.id))
    return [(id_, step, verdict) for id_, step, verdict in rows]


def newest_per_slice(
    session: Session, rollout_id: int, gate: str, since: datetime, slice_seconds: float
) -> list[int]:
    """The id of the gate's newest evaluation in each slice of ``slice_seconds`` from
    ``since``, grouped by the database."""
    slice_ = cast((extract("epoch", _EV.evaluated_at) - since.timestamp()) / slice_seconds, Integer)
    query = (
        select(func.max(_EV.id))
        .where(_EV.rollout_id == rollout_id, _EV.gate == gate)
        .group_by(slice_)
    )
    return list(session.connection().execute(query).scalars())


def newest_evaluation_until(
    session: Session, rollout_id: int, gate: str, at: datetime
) -> int | None:
    """The id of the gate's newest evaluation at or before ``at``."""
    query = (
        select(_EV.id)
        .where(_EV.rollout_id == rollout_id, _EV.gate == gate, _EV.evaluated_at <= at)
        .order_by(_EV.evaluated_at.desc(), _EV.id.desc())
        .limit(1)
    )
    return session.connection().execute(query).scalar()


def evaluation_points(session: Session, ids: Sequence[int]) -> list[Row[Any]]:
    """The evaluations ``ids`` with what a chart draws: ``id``, ``evaluated_at``,
    ``step_index``, ``verdict``, ``role``, ``value``, ``reason`` and ``evidence``."""
    found: list[Row[Any]] = []
    wanted = sorted(ids)
    for start in range(0, len(wanted), _IN_CHUNK):
        query = select(
            _EV.id,
            _EV.evaluated_at,
            _EV.step_index,
            _EV.verdict,
            _EV.role,
            _EV.value,
            _EV.reason,
            _EV.evidence,
        ).where(_EV.id.in_(wanted[start : start + _IN_CHUNK]))
        found.extend(session.connection().execute(query))
    return found


def threshold_and_query(session: Session, evaluation_id: int) -> tuple[str | None, str | None]:
    """The threshold and the query an evaluation was made with."""
    row = session.execute(
        select(GateEvaluation.threshold, GateEvaluation.query).where(
            GateEvaluation.id == evaluation_id
        )
    ).first()
    return (None, None) if row is None else (row[0], row[1])


def suite_runs_of(session: Session, rollout_id: int) -> list[SuiteRun]:
    """The rollout's stored suite runs, oldest first."""
    query = select(SuiteRun).where(SuiteRun.rollout_id == rollout_id).order_by(SuiteRun.id)
    return list(session.scalars(query))


def field_outcomes(session: Session, run_ids: Sequence[int]) -> list[tuple[int, str, str, int]]:
    """(run id, field, outcome, count) over the runs' field results."""
    if not run_ids:
        return []
    query = (
        select(
            SuiteFieldResult.run_id,
            SuiteFieldResult.field,
            SuiteFieldResult.outcome,
            func.count(),
        )
        .where(SuiteFieldResult.run_id.in_(run_ids))
        .group_by(SuiteFieldResult.run_id, SuiteFieldResult.field, SuiteFieldResult.outcome)
    )
    return [
        (run_id, name, outcome, int(count))
        for run_id, name, outcome, count in session.execute(query)
    ]


def artefact_sets_named(session: Session, names: Sequence[str]) -> list[ArtefactSet]:
    """The pinned sets among ``names``."""
    return list(session.scalars(select(ArtefactSet).where(ArtefactSet.name.in_(names))))


def drills_of_pair(
    session: Session, stable_digest: str, canary_digest: str, limit: int
) -> list[Drill]:
    """The newest ``limit`` drills of this (stable, canary) pair in any environment, newest
    first: admission asks for the pair's staging drill, whatever the plan that ran it."""
    query = (
        select(Drill)
        .where(Drill.stable_digest == stable_digest, Drill.canary_digest == canary_digest)
        .order_by(Drill.started_at.desc(), Drill.id.desc())
    )
    return list(session.scalars(query.limit(limit)))


def evaluation_by_id(session: Session, evaluation_id: int) -> GateEvaluation | None:
    """One evaluation, whole: the decision panel shows its evidence."""
    return session.get(GateEvaluation, evaluation_id)
