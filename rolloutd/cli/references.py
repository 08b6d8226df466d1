"""``rolloutctl eval`` on a suite of reference answers, and printing reference runs (also for
``rolloutctl suite show``).

A reference run's figures are a mean score and its errors, not exactness and fields: each
case is printed with its score, or with the request error or judge error that left it
without one. With a baseline, the check is the suite gate's: the paired test of the scores
per case (:func:`~rolloutd.evaluation.reference_gate.judge_reference`, rule
``no_regression``), inconclusive past the bounds on request and judge errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from rolloutd.errors import BadInput

if TYPE_CHECKING:
    from rolloutd.core.plan import SuiteGate
    from rolloutd.evaluation.records import StoredRun
    from rolloutd.evaluation.runner import RunnerOptions
    from rolloutd.evaluation.suite import Suite
    from rolloutd.store.types import Sessions


@dataclass(frozen=True)
class Storage:
    """Where ``eval`` stores its runs: a database's sessions, or nowhere (``--no-store``)."""

    sessions: Sessions | None

    def __call__(self, runs: Sequence[StoredRun]) -> dict[str, int]:
        """Store ``runs`` in one transaction; their ids by role (none when not storing)."""
        if self.sessions is None:
            return {}
        from rolloutd.evaluation.records import store_run
        from rolloutd.store.db import transaction

        with transaction(self.sessions) as session:
            return {run.role: store_run(session, run) for run in runs}


def eval_references(
    suite: Suite,
    targets: Sequence[tuple[str, str]],
    options: RunnerOptions,
    scorer: str,
    judge: dict[str, str | None],
    store: Storage,
    max_request_errors: float,
) -> dict[str, Any]:
    """Answer and score the reference ``suite`` on each (role, URL); store and report.

    :raises BadInput: ``--scorer judge`` without ``--judge-url`` and ``--judge-model``, or
        the judge's key variable is unset (before any request).
    """
    from rolloutd.evaluation.reference_gate import judge_reference
    from rolloutd.evaluation.reference_runs import score_keeping
    from rolloutd.evaluation.references import answer_suite

    spec = _gate(suite, scorer, judge, max_request_errors)
    runs = [
        asyncio.run(
            answer_suite(
                suite, url, role="canary" if role == "canary" else "baseline", options=options
            )
        )
        for role, url in targets
    ]
    sessions = store.sessions

    def transaction() -> Any:
        from rolloutd.store.db import transaction as begin

        assert sessions is not None
        return begin(sessions)

    if sessions is not None:
        scored = asyncio.run(
            score_keeping(
                suite,
                runs,
                scorer,
                judge=spec.judge,
                read=transaction,
                write=transaction,
                clock=lambda: datetime.now(UTC),
                source="--judge-key-env",
            )
        )
    else:
        from rolloutd.evaluation.references import score_runs

        scored = asyncio.run(
            score_runs(suite, runs, scorer, judge=spec.judge, source="--judge-key-env")
        )
    stored = store(scored)
    by_role = {run.role: run for run in scored}
    data: dict[str, Any] = {
        role: {**run.as_json(), "run_id": stored.get(role)} for role, run in by_role.items()
    }
    limit = spec.judge.max_errors if spec.judge is not None else 0.0
    failures = [
        f"{run.role}: {run.request_errors} of {len(run.cases)} cases got no answer (request "
        f"errors), more than --max-request-errors {100 * max_request_errors:g}% allows"
        for run in scored
        if run.request_errors / len(run.cases) > max_request_errors
    ] + [
        f"{run.role}: {run.judge_errors} of {len(run.cases)} answers could not be scored "
        f"(judge errors), more than {100 * limit:g}%"
        for run in scored
        if run.judge_errors / len(run.cases) > limit
    ]
    if "baseline" in by_role:
        evaluation = judge_reference(
            spec,
            by_role["baseline"],
            by_role["canary"],
            name="eval",
            role="step",
            now=datetime.now(UTC),
        )
        data["comparison"] = {
            "verdict": evaluation.verdict.value,
            "reason": evaluation.reason,
            "paired": evaluation.evidence.get("paired"),
            "worst_cases": evaluation.evidence.get("worst_cases", []),
        }
        if evaluation.verdict.value == "fail":
            failures.append(f"no_regression: {evaluation.reason}")
    data["failures"] = failures
    return data


def _gate(
    suite: Suite, scorer: str, judge: dict[str, str | None], max_request_errors: float
) -> SuiteGate:
    """The suite gate that ``eval``'s options describe (its judge's key checked)."""
    from pydantic import ValidationError

    from rolloutd.core.plan import SuiteGate
    from rolloutd.evaluation.judge import api_key

    section: dict[str, Any] | None = None
    if scorer == "judge":
        for option in ("url", "model"):
            if not judge[option]:
                raise BadInput.one(f"--judge-{option}", "", "--scorer judge needs it")
        section = {key: value for key, value in judge.items() if value is not None}
    try:
        spec = SuiteGate.model_validate(
            {
                "kind": "suite",
                "suite": suite.path,
                "rule": "no_regression",
                "scorer": scorer,
                "judge": section,
                "max_request_errors": max_request_errors,
            }
        )
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = ".".join(str(part) for part in problem["loc"])
        raise BadInput.one("--judge-url", field, problem["msg"]) from None
    if spec.judge is not None:
        api_key(spec.judge, "--judge-key-env")
    return spec


def print_references(data: dict[str, Any]) -> None:
    """``eval``'s report on a reference suite: each run, the comparison, the failures."""
    for role in ("canary", "baseline"):
        if role in data:
            print_reference_run(data[role], role)
    comparison = data.get("comparison")
    if comparison is not None:
        paired = comparison["paired"] or {}
        click.echo(
            f"paired: {paired.get('pairs', 0)} cases scored on both; verdict "
            f"{comparison['verdict']}"
            + (f": {comparison['reason']}" if comparison["reason"] else "")
        )
    for failure in data["failures"]:
        click.echo(f"failed: {failure}")
    if not data["failures"]:
        click.echo("passed" if comparison is not None else "passed: the cases were answered")


_WIDTH = 70


def print_reference_run(run: dict[str, Any], title: str) -> None:
    """One run (``ReferenceRun.as_json()``): its headline, then each case."""
    mean = run["mean_score"]
    click.echo(
        f"{title}: {run['endpoint']}  scorer {run['scorer']}  mean score "
        f"{'n/a' if mean is None else f'{mean:.3f}'}  {run['cases']} cases, "
        f"{run['request_errors']} request errors, {run['judge_errors']} judge errors"
        + (
            f"  (stored as run {run['run_id']}: rolloutctl suite show {run['run_id']})"
            if run.get("run_id") and not title.startswith("run ")
            else ""
        )
    )
    for result in run["results"]:
        click.echo(f"  {result['case']:24} {_outcome(result)}")


def _outcome(result: dict[str, Any]) -> str:
    if result["error"] is not None:
        return _clip(f"request error: {result['error']}")
    if result["judge_error"] is not None:
        return _clip(f"judge error: {result['judge_error']}")
    return f"{result['score']:.3f}"


def _clip(text: str) -> str:
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."
