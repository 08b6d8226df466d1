"""Keeping suite runs: store a run whole (run, cases, fields) and read runs back.

A run is of tool calls (:class:`~rolloutd.evaluation.results.RunSummary`) or of reference
answers (:class:`~rolloutd.evaluation.references.ReferenceRun`, whose rows
:mod:`rolloutd.evaluation.reference_records` writes and reads); both are kept alike, and a
stored run comes back as the kind it was.

The daemon stores a canary run and a baseline run each time a suite gate is due, and judges
the newest pair on every tick in between; ``rolloutctl eval`` stores ad-hoc runs with no
rollout. Runs are paired only when their suites have the same digest.

While a job's run goes on, each case's result is *kept* as it completes
(:func:`keep_cases`, one row per case with the result as JSON), so a run taken over after
its holder died asks only the cases without one (:func:`kept_cases`); the run is stored whole
when its last case is in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.evaluation import reference_records
from rolloutd.evaluation.compare import CaseResult, FieldResult
from rolloutd.evaluation.references import ReferenceResult, ReferenceRun
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.store import suite_runs
from rolloutd.store.suite_models import (
    SuiteCaseResult,
    SuiteFieldResult,
    SuiteJobCase,
    SuiteRun,
)

if TYPE_CHECKING:
    from rolloutd.store.types import Session

# The attributes a run, a case and a field keep under the same name in memory and in the
# store: one list serves both directions, so what is stored is what is read back.
_RUN_COLUMNS = ("role", "suite_path", "suite_sha256", "endpoint", "started_at", "finished_at")
_RUN_EXTRA = ("model", "seed", "concurrency")
_CASE_COLUMNS = (
    "case_id",
    "outcome",
    "expected_tool",
    "exact",
    "strict",
    "schema_valid",
    "tool",
    "arguments",
    "error",
    "attempts",
    "latency_s",
)
_FIELD_COLUMNS = ("field", "outcome", "schema_valid", "strict_correct")
# The run's figures are stored for the queries (``schema_counts``) and recomputed from the
# cases when the run is read back.
_RUN_FIGURES = (
    "measured",
    "exact",
    "strict_exact",
    "schema_violations",
    "tool_calls",
    "request_errors",
    "exactness",
    "strict_exactness",
    "outcomes",
)

StoredRun = RunSummary | ReferenceRun
"""A stored run of either kind of suite."""


def store_run(
    session: Session,
    run: StoredRun,
    *,
    rollout_id: int | None = None,
    step_index: int | None = None,
    gate: str | None = None,
    job_id: int | None = None,
) -> int:
    """Store ``run`` with its cases and fields in the session's transaction; returns its id."""
    figures = (
        reference_records.run_figures(run)
        if isinstance(run, ReferenceRun)
        else _attributes(run, _RUN_FIGURES)
    )
    row = SuiteRun(
        rollout_id=rollout_id,
        job_id=job_id,
        step_index=step_index,
        gate=gate,
        cases=len(run.cases),
        **_attributes(run, _RUN_COLUMNS),
        **figures,
        **{key: run.extra.get(key) for key in _RUN_EXTRA},
    )
    suite_runs.add_rows(session, [row])
    if isinstance(run, ReferenceRun):
        suite_runs.add_rows(session, reference_records.case_rows(row.id, run))
        return row.id
    case_rows = [_case_row(row.id, position, case) for position, case in enumerate(run.cases)]
    suite_runs.add_rows(session, case_rows)
    suite_runs.add_rows(
        session,
        (
            SuiteFieldResult(
                case_result_id=case_row.id,
                run_id=row.id,
                expected=_json_or_none(result.expected, result.outcome == "extra"),
                actual=_json_or_none(result.actual, result.outcome == "missing"),
                **_attributes(result, _FIELD_COLUMNS),
            )
            for case_row, case in zip(case_rows, run.cases, strict=True)
            for result in case.fields
        ),
    )
    return row.id


def load_run(session: Session, run_id: int) -> StoredRun | None:
    """The run with its cases and fields, or None when there is no such run."""
    row = suite_runs.run_row(session, run_id)
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
    job_id: int | None = None,
) -> StoredRun | None:
    """The newest run of the rollout for ``role``, optionally of one gate, one suite (by
    path or by digest), one job, and finished at or after ``since``."""
    row = suite_runs.newest_run_row(
        session,
        rollout_id=rollout_id,
        role=role,
        gate=gate,
        suite_path=suite_path,
        suite_sha256=suite_sha256,
        since=since,
        job_id=job_id,
    )
    return None if row is None else _summary(session, row)


def job_of_run(session: Session, run_id: int) -> int | None:
    """The job whose run ``run_id`` is (None for a run outside a job)."""
    return suite_runs.job_of_run(session, run_id)


def last_run_at(
    session: Session, *, rollout_id: int, gate: str, step_index: int | None = None
) -> datetime | None:
    """When the gate's newest canary run finished (during ``step_index``, if given)."""
    return suite_runs.last_canary_run_at(
        session, rollout_id=rollout_id, gate=gate, step_index=step_index
    )


def run_number(
    session: Session, *, rollout_id: int, gate: str, suite_path: str, run_id: int
) -> int:
    """Which of the gate's canary runs of ``suite_path`` in the rollout ``run_id`` is (1 for
    the first): how many were stored up to and including it."""
    count = suite_runs.canary_runs_up_to(
        session, rollout_id=rollout_id, gate=gate, suite_path=suite_path, run_id=run_id
    )
    return max(1, count)


def schema_counts(
    session: Session, *, rollout_id: int, role: RunRole, since: datetime | None = None
) -> tuple[int, int, int | None]:
    """(schema violations, tool calls, run id) of the rollout's newest run for ``role``.

    This is what the schema gates add to the live counts; (0, 0, None) when there is no run.
    """
    found = suite_runs.newest_run_counts(session, rollout_id=rollout_id, role=role, since=since)
    return (0, 0, None) if found is None else found


def keep_cases(
    session: Session,
    *,
    job_id: int,
    suite_sha256: str,
    role: RunRole,
    cases: Sequence[tuple[int, CaseResult | ReferenceResult]],
    now: datetime,
) -> None:
    """Keep the results of ``cases`` (position in the suite, result: a call's, or a
    reference answer's) in the job's run."""
    suite_runs.add_rows(
        session,
        (
            SuiteJobCase(
                job_id=job_id,
                suite_sha256=suite_sha256,
                role=role,
                case_id=case.case_id,
                position=position,
                result=(
                    reference_records.answer_json(case)
                    if isinstance(case, ReferenceResult)
                    else case_json(case)
                ),
                kept_at=now,
            )
            for position, case in cases
        ),
    )


def kept_cases(
    session: Session, *, job_id: int, suite_sha256: str, role: RunRole
) -> dict[int, CaseResult]:
    """The results the job's run of the suite has kept for ``role``, by position."""
    kept = kept_json(session, job_id=job_id, suite_sha256=suite_sha256, role=role)
    return {position: case_of_json(result) for position, result in kept.items()}


def kept_json(
    session: Session, *, job_id: int, suite_sha256: str, role: RunRole
) -> dict[int, dict[str, Any]]:
    """The results the job's run of the suite has kept for ``role``, by position, as kept:
    :func:`case_of_json` or ``reference_records.answer_of_json`` reads each."""
    rows = suite_runs.kept_case_rows(session, job_id=job_id, suite_sha256=suite_sha256, role=role)
    return dict(rows)


def first_kept_at(session: Session, *, job_id: int, suite_sha256: str) -> datetime | None:
    """When the job's run of the suite kept its first result (the run's start, resumed)."""
    return suite_runs.first_kept_at(session, job_id=job_id, suite_sha256=suite_sha256)


def case_json(case: CaseResult) -> dict[str, Any]:
    """``case`` as JSON-ready data that :func:`case_of_json` reads back unchanged."""
    return {
        **_attributes(case, _CASE_COLUMNS),
        "schema_errors": list(case.schema_errors),
        "fields": [
            {
                **_attributes(result, _FIELD_COLUMNS),
                "expected": result.expected,
                "actual": result.actual,
            }
            for result in case.fields
        ],
    }


def case_of_json(data: dict[str, Any]) -> CaseResult:
    """The case :func:`case_json` wrote."""
    return CaseResult(
        fields=tuple(FieldResult(**field) for field in data["fields"]),
        schema_errors=tuple(data["schema_errors"]),
        **{name: data[name] for name in _CASE_COLUMNS},
    )


def _case_row(run_id: int, position: int, case: CaseResult) -> SuiteCaseResult:
    return SuiteCaseResult(
        run_id=run_id,
        position=position,
        schema_errors=list(case.schema_errors),
        **_attributes(case, _CASE_COLUMNS),
    )


def _summary(session: Session, row: SuiteRun) -> StoredRun:
    case_rows = suite_runs.case_rows(session, row.id)
    if row.scorer is not None:
        return ReferenceRun(
            cases=reference_records.results_of(case_rows),
            scorer=row.scorer,
            run_id=row.id,
            extra=_attributes(row, _RUN_EXTRA),
            **_attributes(row, _RUN_COLUMNS),
        )
    field_rows = suite_runs.field_rows(session, row.id)
    fields: dict[int, list[FieldResult]] = {}
    for field_row in field_rows:
        fields.setdefault(field_row.case_result_id, []).append(
            FieldResult(
                expected=_load(field_row.expected),
                actual=_load(field_row.actual),
                **_attributes(field_row, _FIELD_COLUMNS),
            )
        )
    cases = tuple(
        CaseResult(
            fields=tuple(fields.get(case.id, ())),
            schema_errors=tuple(case.schema_errors),
            **_attributes(case, _CASE_COLUMNS),
        )
        for case in case_rows
    )
    return RunSummary(
        cases=cases,
        run_id=row.id,
        extra=_attributes(row, _RUN_EXTRA),
        **_attributes(row, _RUN_COLUMNS),
    )


def _attributes(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(source, name) for name in names}


def _json_or_none(value: Any, absent: bool) -> str | None:
    return None if absent else json.dumps(value, ensure_ascii=False)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)
