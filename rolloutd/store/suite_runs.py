"""Reads of stored suite runs, their cases and fields, and the cases a job's run kept.

Rows in, rows out: turning them into run summaries is
:mod:`rolloutd.evaluation.records`'s work.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVarTuple

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from rolloutd.store.suite_models import SuiteCaseResult, SuiteFieldResult, SuiteJobCase, SuiteRun

_Columns = TypeVarTuple("_Columns")


def add_rows(session: Session, rows: Iterable[Any]) -> None:
    """Add ``rows`` and flush them, so that each has its id."""
    session.add_all(rows)
    session.flush()


def run_row(session: Session, run_id: int) -> SuiteRun | None:
    """The run ``run_id``, or None."""
    return session.get(SuiteRun, run_id)


def newest_run_row(
    session: Session,
    *,
    rollout_id: int,
    role: str,
    gate: str | None = None,
    suite_path: str | None = None,
    suite_sha256: str | None = None,
    since: datetime | None = None,
    job_id: int | None = None,
) -> SuiteRun | None:
    """The newest run of the rollout for ``role``, optionally of one gate, one suite (by path
    or by digest), one job, and finished at or after ``since``."""
    query = select(SuiteRun)
    if job_id is not None:
        query = query.where(SuiteRun.job_id == job_id)
    if gate is not None:
        query = query.where(SuiteRun.gate == gate)
    if suite_path is not None:
        query = query.where(SuiteRun.suite_path == suite_path)
    if suite_sha256 is not None:
        query = query.where(SuiteRun.suite_sha256 == suite_sha256)
    return session.scalars(_newest(query, rollout_id=rollout_id, role=role, since=since)).first()


def job_of_run(session: Session, run_id: int) -> int | None:
    """The job whose run ``run_id`` is (None for a run outside a job)."""
    return session.scalar(select(SuiteRun.job_id).where(SuiteRun.id == run_id))


def last_canary_run_at(
    session: Session, *, rollout_id: int, gate: str, step_index: int | None = None
) -> datetime | None:
    """When the gate's newest canary run finished (during ``step_index``, if given)."""
    query = select(SuiteRun.finished_at).where(
        SuiteRun.rollout_id == rollout_id, SuiteRun.gate == gate, SuiteRun.role == "canary"
    )
    if step_index is not None:
        query = query.where(SuiteRun.step_index == step_index)
    return session.scalars(query.order_by(SuiteRun.finished_at.desc()).limit(1)).first()


def canary_runs_up_to(
    session: Session, *, rollout_id: int, gate: str, suite_path: str, run_id: int
) -> int:
    """How many of the gate's canary runs of ``suite_path`` in the rollout were stored up to
    and including ``run_id``."""
    query = select(func.count()).where(
        SuiteRun.rollout_id == rollout_id,
        SuiteRun.gate == gate,
        SuiteRun.role == "canary",
        SuiteRun.suite_path == suite_path,
        SuiteRun.id <= run_id,
    )
    return int(session.scalar(query) or 0)


def newest_run_counts(
    session: Session, *, rollout_id: int, role: str, since: datetime | None = None
) -> tuple[int, int, int] | None:
    """(schema violations, tool calls, run id) of the rollout's newest run of tool calls for
    ``role`` (a run of reference answers makes no calls)."""
    query = select(SuiteRun.schema_violations, SuiteRun.tool_calls, SuiteRun.id).where(
        SuiteRun.scorer.is_(None)
    )
    row = session.execute(_newest(query, rollout_id=rollout_id, role=role, since=since)).first()
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]))


def kept_case_rows(
    session: Session, *, job_id: int, suite_sha256: str, role: str
) -> list[tuple[int, dict[str, Any]]]:
    """(position, result) of each case the job's run of the suite kept for ``role``."""
    rows = session.execute(
        select(SuiteJobCase.position, SuiteJobCase.result).where(
            SuiteJobCase.job_id == job_id,
            SuiteJobCase.suite_sha256 == suite_sha256,
            SuiteJobCase.role == role,
        )
    )
    return [(int(position), result) for position, result in rows]


def first_kept_at(session: Session, *, job_id: int, suite_sha256: str) -> datetime | None:
    """When the job's run of the suite kept its first result (the run's start, resumed)."""
    return session.scalar(
        select(func.min(SuiteJobCase.kept_at)).where(
            SuiteJobCase.job_id == job_id, SuiteJobCase.suite_sha256 == suite_sha256
        )
    )


def case_rows(session: Session, run_id: int) -> list[SuiteCaseResult]:
    """The run's cases, in suite order."""
    query = select(SuiteCaseResult).where(SuiteCaseResult.run_id == run_id)
    return list(session.scalars(query.order_by(SuiteCaseResult.position)))


def field_rows(session: Session, run_id: int) -> list[SuiteFieldResult]:
    """The run's field results, in the order they were stored."""
    query = select(SuiteFieldResult).where(SuiteFieldResult.run_id == run_id)
    return list(session.scalars(query.order_by(SuiteFieldResult.id)))


def _newest(
    query: Select[*_Columns], *, rollout_id: int, role: str, since: datetime | None
) -> Select[*_Columns]:
    """``query`` narrowed to the rollout's newest run for ``role`` finished at or after
    ``since``."""
    query = query.where(SuiteRun.rollout_id == rollout_id, SuiteRun.role == role)
    if since is not None:
        query = query.where(SuiteRun.finished_at >= since)
    return query.order_by(SuiteRun.finished_at.desc(), SuiteRun.id.desc()).limit(1)
