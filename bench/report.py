"""How long ``rolloutctl report ID --html FILE`` takes on a 48 h bake, and how big the file is.

    python3 bench/report.py [--evaluations 200000] [--runs 3] [--profile]
                            [--server postgresql:///postgres] [--output table|json]

Builds the rollout of ``tests/web/test_report_scale.py`` (a canary at 5% baking 48 h with six
gates, 200,000 evaluations, an OOM that rolls it back at the end) in an SQLite file and, with
``--server``, in a scratch database made on that Postgres server (dropped at the end). On each
it measures, as the median of ``--runs``:

- the page's data read from the store and thinned (``rollout_page``), in-process;
- the whole report rendered (``rollout_html(report=True)``), in-process, a new session each run;
- the whole ``rolloutctl report ID --html FILE`` process, a new interpreter each run;

and prints the HTML's size and, per gate, the evaluations stored and the points drawn. The
issue's budget: under 2 s and under 5 MB. ``--profile`` prints where one in-process render
spends its time (cProfile, by cumulative time).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench._common and tests

from bench._common import add_server_option, print_results, scratch_database
from rolloutd.store.db import make_engine, session_factory, transaction, upgrade
from rolloutd.web.data import rollout_page
from rolloutd.web.pages import rollout_html
from tests.web.test_report_scale import EVALUATIONS, build_bake

BUDGET_S = 2.0
BUDGET_BYTES = 5_000_000


def progress(message: str) -> None:
    """A progress line on stderr, so that ``--output json`` stays clean."""
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def median_time(run: Any, runs: int) -> float:
    """The median wall time of ``runs`` calls of ``run``, in seconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def rolloutctl() -> str:
    """The ``rolloutctl`` beside this interpreter (the virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "rolloutctl"
    return str(beside) if beside.exists() else "rolloutctl"


def measure(backend: str, url: str, evaluations: int, runs: int, profile: bool) -> dict[str, Any]:
    """Build the bake in the database at ``url`` and time its report."""
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        progress(f"{backend}: building a rollout with {evaluations:,} evaluations")
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # the leader's tick log lines
            bake = build_bake(sessions, evaluations)
        built = time.perf_counter() - started
        now = bake.rolled_back_at + timedelta(hours=1)
        html = ""

        def data() -> None:
            with transaction(sessions) as session:
                rollout_page(session, bake.rollout_id, now=now)

        def render() -> None:
            nonlocal html
            with transaction(sessions) as session:
                html = rollout_html(session, bake.rollout_id, now=now, report=True)

        progress(f"{backend}: timing the report in-process")
        data_s = median_time(data, runs)
        render_s = median_time(render, runs)
        with transaction(sessions) as session:
            page = rollout_page(session, bake.rollout_id, now=now)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            render()
            profiler.disable()
            print(f"\n{backend}: one in-process render, by cumulative time", file=sys.stderr)
            stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
            stats.print_stats(30)
    finally:
        engine.dispose()
    progress(f"{backend}: timing rolloutctl report")
    with tempfile.TemporaryDirectory(prefix="rolloutd-report-") as tmp:
        target = Path(tmp) / "report.html"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTD_")}
        env.update(ROLLOUTD_DATABASE_URL=url, ROLLOUTD_ENV_FILE="/nonexistent")
        command = [rolloutctl(), "report", str(bake.rollout_id), "--html", str(target)]

        def report() -> None:
            done = subprocess.run(command, env=env, capture_output=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr.decode()}")

        process_s = median_time(report, runs)
        file_bytes = target.stat().st_size
    return {
        "backend": backend,
        "evaluations": evaluations,
        "build_s": built,
        "data_s": data_s,
        "render_s": render_s,
        "process_s": process_s,
        "html_bytes": len(html.encode()),
        "file_bytes": file_bytes,
        "gates": [{"name": g.name, "stored": g.stored, "drawn": len(g.points)} for g in page.gates],
    }


def report(results: list[dict[str, Any]]) -> None:
    """The table of timings and sizes per database, and the points drawn per gate."""
    print(
        "| database | evaluations | build | data (in-process) | render (in-process) "
        "| rolloutctl report | HTML | within 2 s and 5 MB |"
    )
    print("|---" + "|---:" * 7 + "|")
    for r in results:
        fits = max(r["render_s"], r["process_s"]) < BUDGET_S and r["file_bytes"] < BUDGET_BYTES
        print(
            f"| {r['backend']} | {r['evaluations']:,} | {r['build_s']:.1f} s "
            f"| {r['data_s']:.2f} s | {r['render_s']:.2f} s | {r['process_s']:.2f} s "
            f"| {r['file_bytes'] / 1e6:.2f} MB | {'yes' if fits else 'NO'} |"
        )
    print()
    print("| gate | " + " | ".join(f"{r['backend']} stored / drawn" for r in results) + " |")
    print("|---" + "|---:" * len(results) + "|")
    for i, gate in enumerate(results[0]["gates"]):
        cells = [f"{r['gates'][i]['stored']:,} / {r['gates'][i]['drawn']:,}" for r in results]
        print(f"| {gate['name']} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=EVALUATIONS)
    parser.add_argument("--runs", type=int, default=3, help="runs per timing (the median)")
    parser.add_argument("--profile", action="store_true", help="cProfile one render (stderr)")
    parser.add_argument("--output", choices=["table", "json"], default="table")
    add_server_option(parser)
    parser.set_defaults(server=None)  # Postgres only when --server names one
    args = parser.parse_args()
    if args.evaluations < 6 or args.runs < 1:
        parser.error("--evaluations must be 6 or more (one a gate), --runs 1 or more")
    results = []
    with tempfile.TemporaryDirectory(prefix="rolloutd-report-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'rolloutd.db'}"
        upgrade(url)
        results.append(measure("sqlite", url, args.evaluations, args.runs, args.profile))
    if args.server:
        with scratch_database(args.server) as url:
            results.append(measure("postgres", url, args.evaluations, args.runs, args.profile))
    print_results(results, args.output, report)


if __name__ == "__main__":
    main()
