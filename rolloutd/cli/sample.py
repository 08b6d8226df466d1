"""``rolloutctl suite sample``: a day of the gateway's capture as a tool-argument suite.

What it reads, keeps and drops is ``rolloutd.evaluation.sampling``'s; this prints it. Nothing
of the captured content is printed: counts, tools, files and line numbers only.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import click

from rolloutd.cli.common import OUTPUT, ROW_ID, emit
from rolloutd.errors import BadInput


@click.group("suite")
def suite_group() -> None:
    """Tool-argument suites made from live traffic."""


@suite_group.command("sample")
@click.argument("capture", type=click.Path(file_okay=False))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Suite file.")
@click.option("--day", help="The UTC day to sample, YYYY-MM-DD (default: yesterday).")
@click.option("--since", help="Start of the stretch to sample (ISO 8601); with --until.")
@click.option("--until", help="End of the stretch to sample (ISO 8601); with --since.")
@click.option("--last", help="Sample the stretch that ends now, e.g. 24h or 90m.")
@click.option("--cases", type=click.IntRange(1, 20_000), default=300, show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option(
    "--assume-pool",
    type=click.Choice(["stable", "canary"]),
    help="The pool that answered lines that do not say (a capture written by another tool).",
)
@OUTPUT
def sample_command(
    capture: str,
    out: str,
    day: str | None,
    since: str | None,
    until: str | None,
    last: str | None,
    cases: int,
    seed: int,
    assume_pool: str | None,
    output: str,
) -> None:
    """Sample the requests CAPTURE holds for a day into a suite written to --out.

    Keeps the requests that offered tools and that the stable pool answered with a tool call
    (its call is the reference), removes duplicates, shares --cases among the tools (a rare
    tool keeps all it has) and draws with --seed. Prints what it kept per tool and what it
    dropped and why; unreadable lines are listed with their file and line and skipped.
    Exit 2 when nothing usable was captured (nothing is written then).

    \b
    Examples:
      rolloutctl suite sample /var/lib/agent-gateway/capture --out live.jsonl
      rolloutctl suite sample capture/ --day 2026-12-04 --cases 500 --seed 7 --out live.jsonl
      rolloutctl suite sample capture/ --last 6h --out live.jsonl
      rolloutctl suite sample batch/ --assume-pool stable --out live.jsonl -o json
    """
    from rolloutd.evaluation.sampling import sample_day

    start, end = _stretch(day, since, until, last)
    try:
        report = sample_day(
            Path(capture),
            since=start,
            until=end,
            cases=cases,
            seed=seed,
            out=Path(out),
            assume_pool=assume_pool,
        )
    except OSError as exc:
        # The capture was read; what failed is writing the suite (a missing or read-only
        # directory), and the temporary file is gone again.
        raise BadInput.one(out, "", f"cannot write the suite: {exc.strerror or exc}") from None
    data = {"capture": capture, "since": start.isoformat(), "until": end.isoformat()}
    data |= report.as_json()
    if report.kept == 0:
        reason = "no usable captured case"
        if not report.files:
            reason = f"nothing captured from {start.isoformat()} to {end.isoformat()}"
        elif report.dropped:
            reason += " (" + ", ".join(f"{n} {w}" for w, n in report.dropped.items()) + ")"
        raise BadInput.one(capture, "", reason + "; nothing written")
    emit(data, output, _print)


def _print(data: dict[str, Any]) -> None:
    click.echo(f"{data['out']}: {data['kept']} cases (sha256 {data['sha256'][:12]})")
    for tool, kept in data["by_tool"].items():
        click.echo(f"  {tool}: {kept} of {data['available'][tool]}")
    for reason, count in data["dropped"].items():
        click.echo(f"  dropped {count}: {reason}")
    for problem in data["problems"]:
        click.echo(f"  skipped {problem}", err=True)
    if data["unreported_problems"]:
        click.echo(f"  skipped {data['unreported_problems']} more unreadable lines", err=True)


def _stretch(
    day: str | None, since: str | None, until: str | None, last: str | None
) -> tuple[datetime, datetime]:
    """[start, end) of what to sample, from the options.

    :raises BadInput: a malformed or contradictory choice.
    """
    chosen = [
        name for name, value in (("--day", day), ("--since", since), ("--last", last)) if value
    ]
    if len(chosen) > 1:
        raise BadInput.one(
            chosen[1], "", f"give one of --day, --since/--until, --last, not {chosen[0]} too"
        )
    if (since is None) != (until is None):
        raise BadInput.one("--since/--until", "", "give both, or neither")
    if last is not None:
        from rolloutd.core.durations import parse_duration

        try:
            span = parse_duration(last)
        except ValueError as exc:
            raise BadInput.one("--last", "", str(exc)) from None
        if span <= timedelta(0):
            raise BadInput.one("--last", "", "must be longer than 0s")
        end = datetime.now(UTC)
        return end - span, end
    if since is not None and until is not None:
        start, end = _instant("--since", since), _instant("--until", until)
        if end <= start:
            raise BadInput.one("--until", "", "must be later than --since")
        return start, end
    try:
        chosen_day = (
            date.fromisoformat(day) if day else datetime.now(UTC).date() - timedelta(days=1)
        )
    except ValueError:
        raise BadInput.one("--day", "", f"expected YYYY-MM-DD, got {day!r}") from None
    start = datetime.combine(chosen_day, time(), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _instant(option: str, text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput.one(option, "", f"expected an ISO 8601 time, got {text!r}") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@suite_group.command("show")
@click.argument("run_id", metavar="RUN", type=ROW_ID)
@OUTPUT
def show_command(run_id: int, output: str) -> None:
    """Show a stored evaluation run: its figures and per-field results, or for a suite of
    reference answers, each case's score, request error or judge error.

    RUN is the number `rolloutctl eval` printed ("stored as run 1"), or a run the daemon
    made for a rollout's suite gate.

    \b
    Examples:
      rolloutctl suite show 1
      rolloutctl suite show 1 --output json
    """
    from rolloutd.cli.common import database
    from rolloutd.cli.references import print_reference_run
    from rolloutd.evaluation import records
    from rolloutd.evaluation.references import ReferenceRun

    with database() as session:
        run = records.load_run(session, run_id)
    if run is None:
        raise BadInput.one("RUN", "", f"there is no evaluation run {run_id}")
    data = {**run.as_json(), "run_id": run_id, "role": run.role}
    if isinstance(run, ReferenceRun):
        # Answers and scores, not calls and fields.
        emit(data, output, lambda shown: print_reference_run(shown, _title(shown)))
        return
    emit(data, output, _print_run)


def _title(run: dict[str, Any]) -> str:
    return f"run {run['run_id']} ({run['role']})"


def _print_run(run: dict[str, Any]) -> None:
    pct = _pct
    click.echo(
        f"run {run['run_id']} ({run['role']}): {run['endpoint']}  {run['measured']}/"
        f"{run['cases']} cases answered  schema-aware {pct(run['exactness'])}  strict "
        f"{pct(run['strict_exactness'])}  schema violations {pct(run['schema_violation_rate'])}"
    )
    click.echo(f"  {run['started_at']} .. {run['finished_at']}")
    click.echo("  " + "  ".join(f"{k} {v}" for k, v in run["outcomes"].items()))
    header = f"  {'field':34} {'cases':>5} {'ok':>5} {'format':>6} {'wrong':>5} "
    click.echo(header + f"{'miss':>5} {'extra':>5} {'schema':>6} {'strict':>6}")
    for row in run["fields"]:
        click.echo(
            f"  {row['field']:34} {row['cases']:5} {row['correct']:5} {row['format']:6} "
            f"{row['wrong_value']:5} {row['missing']:5} {row['extra']:5} "
            f"{row['schema_violations']:6} {row['strict_correct']:6}"
        )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"
