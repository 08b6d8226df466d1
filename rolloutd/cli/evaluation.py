"""``rolloutctl eval``: run the tool-argument suite against an endpoint, outside any rollout.

The suite and the options are read and checked whole before a single request goes out; the
database (when storing) is checked before the run too, so a run is never thrown away at the
end. aiohttp, jsonschema and the runner are imported inside the command: ``rolloutctl
status`` must not pay for them.

The exit code is the check's verdict, for scripts: 3 when a run measured too little (more
than ``--max-request-errors`` of its cases got no answer) or, with a baseline, when a
paired rule fired. The report's ``failures`` say which.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from rolloutd.cli.common import OUTPUT, FiniteFloatRange, database_url, emit
from rolloutd.cli.errors import REFUSED
from rolloutd.cli.references import Storage, print_references
from rolloutd.errors import BadInput

if TYPE_CHECKING:
    from rolloutd.evaluation.results import RunSummary

API_KEY_ENV = "ROLLOUTD_EVAL_API_KEY"
MAX_REQUEST_ERRORS = 0.05
"""A suite gate's default ``max_request_errors``, so eval and a rollout agree on "too little"."""
MAX_ANSWER_BYTES = 1024 * 1024
MAX_DROP_POINTS, ALPHA = 1.0, 0.05


@click.command("eval")
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--endpoint", required=True, help="Base URL of the engine to test (the canary).")
@click.option(
    "--baseline-endpoint", help="Base URL of the baseline engine: adds the paired comparison."
)
@click.option("--concurrency", type=click.IntRange(1, 256), default=8)
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=0.1, max=3600.0),
    default=60.0,
    help="Seconds per request before it is retried (then a request error).",
)
@click.option("--retries", type=click.IntRange(0, 10), default=2)
@click.option(
    "--max-request-errors",
    type=FiniteFloatRange(min=0.0, max=1.0),
    default=MAX_REQUEST_ERRORS,
    help="Share of a run's cases that may go unanswered (request errors) before eval fails.",
)
@click.option(
    "--max-answer-bytes",
    type=click.IntRange(1, 1024**3),
    default=MAX_ANSWER_BYTES,
    help="Largest answer body read; a larger answer is a request error.",
)
@click.option("--model", help="Model name to request (default: the first one /v1/models lists).")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=1234, help="Sampling seed.")
@click.option(
    "--send-expected",
    is_flag=True,
    help="Send the expected call in each request (rolloutd_expected); for the simulated fleet.",
)
@click.option(
    "--scorer",
    type=click.Choice(["exact", "token_f1", "judge"]),
    default="token_f1",
    help="How a suite of reference answers is scored (a suite of tool calls ignores it).",
)
@click.option("--judge-url", help="Base URL of the judge (OpenAI-compatible), for --scorer judge.")
@click.option("--judge-model", help="The judge's model name, for --scorer judge.")
@click.option(
    "--judge-key-env", help="The environment variable holding the judge's API key, if any."
)
@click.option("--no-store", is_flag=True, help="Do not store the runs in the database.")
@OUTPUT
def eval_command(
    suite: str,
    endpoint: str,
    baseline_endpoint: str | None,
    no_store: bool,
    output: str,
    max_request_errors: float,
    scorer: str,
    judge_url: str | None,
    judge_model: str | None,
    judge_key_env: str | None,
    **runner: Any,
) -> None:
    """Run the tool-argument SUITE (JSONL) against an OpenAI-compatible endpoint.

    Prints exactness two ways: schema-aware (numbers as numbers, dates as dates, key order
    ignored; "$1,200.00" for 1200 is a format deviation) and strict (plain string equality),
    with outcomes per case and per field. With --baseline-endpoint both builds answer the
    same cases and the paired comparison is printed: per-field regressions (exact McNemar,
    Holm-adjusted) and the 1-point max-drop test. Runs are stored in the database
    (ROLLOUTD_DATABASE_URL) unless --no-store. An API key, if the endpoint needs one, is
    read from ROLLOUTD_EVAL_API_KEY. A bad suite is refused (exit 2, file:line and field)
    before any request is sent.

    A suite of reference answers (cases with "reference") is answered and scored instead
    (--scorer: exact, token_f1, or an LLM judge at --judge-url); each case's score and the
    mean are printed, and with --baseline-endpoint the paired test of the scores (the
    suite gate's no_regression rule) is the check.

    \b
    Exit codes:
      0  the check passed
      1  runtime failure (the database could not be reached)
      2  bad input (the suite, an option, an endpoint URL); nothing was sent
      3  the check failed: more than --max-request-errors of a run's cases got no
         answer, or with --baseline-endpoint a paired rule fired: max_drop (exactness
         more than 1 point below the baseline) or no_regression (a field or whole
         calls worse, Holm-adjusted); "failures" in the JSON says which

    \b
    Examples:
      rolloutctl eval gates/suites/tool-args-300.jsonl --endpoint http://10.20.0.14:8000
      rolloutctl eval gates/suites/tool-args-300.jsonl --endpoint http://10.20.0.14:8000 \\
          --baseline-endpoint http://10.20.0.11:8000 --concurrency 16 --output json
    """
    from rolloutd.core.urls import url_problem
    from rolloutd.evaluation.runner import RunnerOptions, public_endpoint, run_suite
    from rolloutd.evaluation.suite import load_suite
    from rolloutd.redact import register_secret

    for option, url in (("--endpoint", endpoint), ("--baseline-endpoint", baseline_endpoint)):
        problem = url_problem(url) if url is not None else None
        if problem is not None:
            raise BadInput.one(option, "", f"{problem}, got {url!r}")
    loaded = load_suite(suite)
    api_key = os.environ.get(API_KEY_ENV)
    register_secret(api_key)
    # The other options are the runner's, named as ``RunnerOptions`` names them.
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    options = RunnerOptions(**runner, headers=headers)
    targets = [("canary", endpoint)]
    if baseline_endpoint:
        targets.append(("baseline", baseline_endpoint))
    if loaded.is_reference:
        from rolloutd.cli.references import eval_references

        judge = {"url": judge_url, "model": judge_model, "api_key_env": judge_key_env}
        with _storage(not no_store) as store:
            data = eval_references(
                loaded, targets, options, scorer, judge, store, max_request_errors
            )
        emit(data, output, print_references)
        if data["failures"]:
            sys.exit(REFUSED)
        return
    with _storage(not no_store) as store:
        runs: dict[str, RunSummary] = {}
        for role, url in targets:
            with _progress(f"{role} {public_endpoint(url)}", len(loaded)) as progress:
                runs[role] = run_suite(
                    loaded,
                    url,
                    role="canary" if role == "canary" else "baseline",
                    options=options,
                    progress=progress,
                )
        stored = store(list(runs.values()))
    data = _report(runs, stored, max_request_errors)
    emit(data, output, _print)
    if data["failures"]:
        sys.exit(REFUSED)


@contextmanager
def _storage(enabled: bool) -> Iterator[Storage]:
    if not enabled:
        yield Storage(None)
        return
    from rolloutd.store.db import check_revision, make_engine, session_factory

    engine = make_engine(database_url())
    try:
        check_revision(engine)
        yield Storage(session_factory(engine))
    finally:
        engine.dispose()


@contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[[int, int], None] | None]:
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, _total: bar.update(task, completed=done)


def _report(
    runs: dict[str, RunSummary], stored: dict[str, int], max_request_errors: float
) -> dict[str, Any]:
    from rolloutd.evaluation.gate import field_table
    from rolloutd.evaluation.statistics import max_drop_test, pair, worse_p_value

    data: dict[str, Any] = {
        role: {**run.as_json(), "run_id": stored.get(role)} for role, run in runs.items()
    }
    failures = [
        f"{role}: {run.request_errors} of {len(run.cases)} cases got no answer (request "
        f"errors), more than --max-request-errors {100 * max_request_errors:g}% allows"
        for role, run in runs.items()
        # The same share a suite gate calls "too little measured".
        if run.request_errors / len(run.cases) > max_request_errors
    ]
    if "baseline" in runs:
        baseline, canary = runs["baseline"], runs["canary"]
        flags = [
            {c.case_id: bool(c.exact) for c in run.cases if c.measured}
            for run in (baseline, canary)
        ]
        cases = pair(flags[0], flags[1])
        drop = max_drop_test(cases, MAX_DROP_POINTS / 100, ALPHA)
        fields = field_table(baseline, canary, ALPHA)
        data["comparison"] = {
            "calls": {**cases.as_evidence(), "p_value_worse": worse_p_value(cases)},
            "max_drop": drop.as_evidence(),
            "fields": fields,
        }
        if drop.fires:
            low, high = drop.interval
            failures.append(
                f"max_drop: exactness dropped {100 * cases.drop:.2f} points (interval "
                f"{100 * low:.2f} to {100 * high:.2f}), more than {MAX_DROP_POINTS:g} "
                f"(p={drop.p_value:.2g})"
            )
        regressed = [row["field"] for row in fields if row["regressed"]]
        if regressed:
            failures.append(f"no_regression: worse than the baseline: {', '.join(regressed)}")
    data["failures"] = failures
    return data


def _print(data: dict[str, Any]) -> None:
    for role in ("canary", "baseline"):
        if role not in data:
            continue
        run = data[role]
        click.echo(
            f"{role}: {run['endpoint']}  {run['measured']}/{run['cases']} cases answered  "
            f"schema-aware {_pct(run['exactness'])}  strict {_pct(run['strict_exactness'])}  "
            f"schema violations {_pct(run['schema_violation_rate'])}"
            + (
                f"  (stored as run {run['run_id']}: rolloutctl suite show {run['run_id']})"
                if run.get("run_id")
                else ""
            )
        )
        click.echo("  " + "  ".join(f"{k} {v}" for k, v in run["outcomes"].items()))
        header = f"  {'field':34} {'cases':>5} {'ok':>5} {'format':>6} {'wrong':>5} "
        click.echo(header + f"{'miss':>5} {'extra':>5} {'schema':>6} {'strict':>6}")
        for row in run["fields"]:
            click.echo(
                f"  {row['field']:34} {row['cases']:5} {row['correct']:5} {row['format']:6} "
                f"{row['wrong_value']:5} {row['missing']:5} {row['extra']:5} "
                f"{row['schema_violations']:6} {row['strict_correct']:6}"
            )
    comparison = data.get("comparison")
    if comparison is not None:
        calls, drop = comparison["calls"], comparison["max_drop"]
        click.echo(
            f"paired: {calls['pairs']} cases, canary worse in {calls['canary_worse']}, better "
            f"in {calls['canary_better']} (p={calls['p_value_worse']:.3g}); drop "
            f"{drop['drop_points']:.2f} points, interval {drop['drop_interval_points']}, "
            f"more than {MAX_DROP_POINTS:g} point: {'yes' if drop['fires'] else 'not shown'}"
        )
        regressed = [row["field"] for row in comparison["fields"] if row["regressed"]]
        click.echo(f"fields regressed: {', '.join(regressed) if regressed else 'none'}")
    for failure in data["failures"]:
        click.echo(f"failed: {failure}")
    if data["failures"]:
        return
    if comparison is None:
        # Alone, a run has no rule to fail but request errors: its exactness is reported.
        click.echo(
            "passed: the cases were answered (exactness is judged only against a baseline: "
            "--baseline-endpoint)"
        )
    else:
        click.echo("passed: max_drop and no_regression did not fire")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"
