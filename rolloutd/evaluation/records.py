"""Keeping suite runs: store a run whole (run, cases, fields) and read runs back.

The daemon stores a canary run and a baseline run each time a suite gate is due, and judges
the newest pair on every tick in between; ``rolloutctl eval`` stores ad-hoc runs with no
rollout. Runs are paired only when their suites have the same digest.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rolloutd.evaluation.compare import CaseResult, FieldResult
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.store.suite_models import SuiteCaseResult, SuiteFieldResult, SuiteRun


def store_run(
    session: Session,
    run: RunSummary,
    *,
    rollout_id: int | None = None,
    step_index: int | None = None,
    gate: str | None = None,
    job_id: int | None = None,
) -> int:
    """Store ``run`` with its cases and fields in the session's transaction; returns its id."""
    row = SuiteRun(
        rollout_id=rollout_id,
        job_id=job_id,
        step_index=step_index,
        gate=gate,
        role=run.role,
        suite_path=run.suite_path,
        suite_sha256=run.suite_sha256,
        endpoint=run.endpoint,
        model=run.extra.get("model"),
        seed=run.extra.get("seed"),
        concurrency=run.extra.get("concurrency"),
        started_at=run.started_at,
        finished_at=run.finished_at,
        cases=len(run.cases),
        measured=run.measured,
        exact=run.exact,
        strict_exact=run.strict_exact,
        schema_violations=run.schema_violations,
        tool_calls=run.tool_calls,
        request_errors=run.request_errors,
        exactness=run.exactness,
        strict_exactness=run.strict_exactness,
        outcomes=run.outcomes,
    )
    session.add(row)
    session.flush()
    case_rows = [_case_row(row.id, position, case) for position, case in enumerate(run.cases)]
    session.add_all(case_rows)
    session.flush()
    session.add_all(
        SuiteFieldResult(
            case_result_id=case_row.id,
            run_id=row.id,
            field=result.field,
            outcome=result.outcome,
            schema_valid=result.schema_valid,
            strict_correct=result.strict_correct,
            expected=_json_or_none(result.expected, result.outcome == "extra"),
            actual=_json_or_none(result.actual, result.outcome == "missing"),
        )
        for case_row, case in zip(case_rows, run.cases, strict=True)
        for result in case.fields
    )
    session.flush()
    return row.id


def load_run(session: Session, run_id: int) -> RunSummary | None:
    """The run with its cases and fields, or None when there is no such run."""
    row = session.get(SuiteRun, run_id)
    return None if row is None else _summary(session, row)


def latest_run(
    session: Session,
    *,
    rollout_id: int,
    role: RunRole,
    gate: str | None = None,
    suite_path: str | None = None,
    suite_sha256: str | None = None,
    since: datetime | None = None,
) -> RunSummary | None:
    """The newest run of the rollout for ``role``, optionally of one gate, one suite (by
    path or by digest), and finished at or after ``since``."""
    query = select(SuiteRun).where(SuiteRun.rollout_id == rollout_id, SuiteRun.role == role)
    if gate is not None:
        query = query.where(SuiteRun.gate == gate)
    if suite_path is not None:
        query = query.where(SuiteRun.suite_path == suite_path)
    if suite_sha256 is not None:
        query = query.where(SuiteRun.suite_sha256 == suite_sha256)
    if since is not None:
        query = query.where(SuiteRun.finished_at >= since)
    row = session.scalars(
        query.order_by(SuiteRun.finished_at.desc(), SuiteRun.id.desc()).limit(1)
    ).first()
    return None if row is None else _summary(session, row)


def last_run_at(
    session: Session, *, rollout_id: int, gate: str, step_index: int | None = None
) -> datetime | None:
    """When the gate's newest canary run finished (during ``step_index``, if given)."""
    query = select(SuiteRun.finished_at).where(
        SuiteRun.rollout_id == rollout_id, SuiteRun.gate == gate, SuiteRun.role == "canary"
    )
    if step_index is not None:
        query = query.where(SuiteRun.step_index == step_index)
    return session.scalars(query.order_by(SuiteRun.finished_at.desc()).limit(1)).first()


def run_number(
    session: Session, *, rollout_id: int, gate: str, suite_path: str, run_id: int
) -> int:
    """Which of the gate's canary runs of ``suite_path`` in the rollout ``run_id`` is (1 for
    the first): how many were stored up to and including it."""
    query = select(func.count()).where(
        SuiteRun.rollout_id == rollout_id,
        SuiteRun.gate == gate,
        SuiteRun.role == "canary",
        SuiteRun.suite_path == suite_path,
        SuiteRun.id <= run_id,
    )
    return max(1, int(session.scalar(query) or 0))


def schema_counts(
    session: Session, *, rollout_id: int, role: RunRole, since: datetime | None = None
) -> tuple[int, int, int | None]:
    """(schema violations, tool calls, run id) of the rollout's newest run for ``role``.

    This is what the schema gates add to the live counts; (0, 0, None) when there is no run.
    """
    query = select(SuiteRun.schema_violations, SuiteRun.tool_calls, SuiteRun.id).where(
        SuiteRun.rollout_id == rollout_id, SuiteRun.role == role
    )
    if since is not None:
        query = query.where(SuiteRun.finished_at >= since)
    row = session.execute(
        query.order_by(SuiteRun.finished_at.desc(), SuiteRun.id.desc()).limit(1)
    ).first()
    return (0, 0, None) if row is None else (int(row[0]), int(row[1]), int(row[2]))


def _case_row(run_id: int, position: int, case: CaseResult) -> SuiteCaseResult:
    return SuiteCaseResult(
        run_id=run_id,
        case_id=case.case_id,
        position=position,
        expected_tool=case.expected_tool,
        tool=case.tool,
        outcome=case.outcome,
        exact=case.exact,
        strict=case.strict,
        schema_valid=case.schema_valid,
        arguments=case.arguments,
        schema_errors=list(case.schema_errors),
        error=case.error,
        attempts=case.attempts,
        latency_s=case.latency_s,
    )


def _summary(session: Session, row: SuiteRun) -> RunSummary:
    case_rows = session.scalars(
        select(SuiteCaseResult)
        .where(SuiteCaseResult.run_id == row.id)
        .order_by(SuiteCaseResult.position)
    ).all()
    field_rows = session.scalars(
        select(SuiteFieldResult)
        .where(SuiteFieldResult.run_id == row.id)
        .order_by(SuiteFieldResult.id)
    ).all()
    fields: dict[int, list[FieldResult]] = {}
    for field_row in field_rows:
        fields.setdefault(field_row.case_result_id, []).append(
            FieldResult(
                field_row.field,
                field_row.outcome,  # type: ignore[arg-type]
                field_row.schema_valid,
                field_row.strict_correct,
                _load(field_row.expected),
                _load(field_row.actual),
            )
        )
    cases = tuple(
        CaseResult(
            case_id=case.case_id,
            outcome=case.outcome,  # type: ignore[arg-type]
            expected_tool=case.expected_tool,
            exact=case.exact,
            strict=case.strict,
            schema_valid=case.schema_valid,
            fields=tuple(fields.get(case.id, ())),
            tool=case.tool,
            arguments=case.arguments,
            schema_errors=tuple(case.schema_errors),
            error=case.error,
            attempts=case.attempts,
            latency_s=case.latency_s,
        )
        for case in case_rows
    )
    return RunSummary(
        suite_path=row.suite_path,
        suite_sha256=row.suite_sha256,
        endpoint=row.endpoint,
        role=row.role,  # type: ignore[arg-type]
        cases=cases,
        started_at=row.started_at,
        finished_at=row.finished_at,
        run_id=row.id,
        extra={"model": row.model, "seed": row.seed, "concurrency": row.concurrency},
    )


def _json_or_none(value: Any, absent: bool) -> str | None:
    return None if absent else json.dumps(value, ensure_ascii=False)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)
