"""Printing runs of reference suites: ``rolloutctl suite show`` and ``rolloutctl eval``.

A reference run's figures are a mean score and its errors, not exactness and fields: each
case is printed with its score, or with the request error or judge error that left it
without one.
"""

from __future__ import annotations

from typing import Any

import click

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
