"""Keeping runs of reference suites: each case's answer, score and judge error.

A run of reference answers is stored in the tables of the tool-call runs (``suite_runs``,
``suite_case_results``; :mod:`rolloutd.evaluation.records` stores and reads both kinds), told
apart by its ``scorer``. Each case keeps its answer's text, its score in [0, 1], and the
request error or judge error that left it unscored; its outcome says which (``scored``,
``judge_error``, ``request_error``). The tool-call figures of the run are zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rolloutd.evaluation.references import ReferenceResult, ReferenceRun
from rolloutd.store.suite_models import SuiteCaseResult

# The attributes a reference case keeps under the same name in memory and in the store.
_CASE_COLUMNS = ("case_id", "answer", "score", "error", "judge_error", "attempts", "latency_s")


def outcome_of(result: ReferenceResult) -> str:
    """How the case came out: ``scored``, ``judge_error`` or ``request_error``."""
    if not result.measured:
        return "request_error"
    return "scored" if result.scored else "judge_error"


def run_figures(run: ReferenceRun) -> dict[str, Any]:
    """The run's figures in the columns of a run of tool calls (none of which it has)."""
    if run.scorer is None:
        raise ValueError("a run of reference answers is stored once it is scored")
    outcomes = {"scored": 0, "judge_error": 0, "request_error": 0}
    for result in run.cases:
        outcomes[outcome_of(result)] += 1
    return {
        "scorer": run.scorer,
        "measured": len(run.cases) - run.request_errors,
        "exact": 0,
        "strict_exact": 0,
        "schema_violations": 0,
        "tool_calls": 0,
        "request_errors": run.request_errors,
        "exactness": None,
        "strict_exactness": None,
        "outcomes": outcomes,
    }


def case_rows(run_id: int, run: ReferenceRun) -> list[SuiteCaseResult]:
    """The run's cases as rows, in suite order."""
    return [
        SuiteCaseResult(
            run_id=run_id,
            position=position,
            outcome=outcome_of(result),
            schema_errors=[],
            **answer_json(result),
        )
        for position, result in enumerate(run.cases)
    ]


def results_of(rows: Sequence[SuiteCaseResult]) -> tuple[ReferenceResult, ...]:
    """The cases :func:`case_rows` stored, in suite order."""
    return tuple(
        ReferenceResult(**{name: getattr(row, name) for name in _CASE_COLUMNS}) for row in rows
    )


def answer_json(result: ReferenceResult) -> dict[str, Any]:
    """``result`` as JSON-ready data that :func:`answer_of_json` reads back unchanged."""
    return {name: getattr(result, name) for name in _CASE_COLUMNS}


def answer_of_json(data: dict[str, Any]) -> ReferenceResult:
    """The case :func:`answer_json` wrote."""
    return ReferenceResult(**{name: data[name] for name in _CASE_COLUMNS})
