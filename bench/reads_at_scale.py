"""What the daemon's read-only pages cost as the rollouts grow: ``/metrics`` and the web list.

    python3 bench/reads_at_scale.py [--rollouts 10,100,1000] [--evaluations 300] [--runs 5]
                                    [--output table|json] [--server postgresql:///postgres]

For each N: a scratch database on the Postgres server with N rollouts of 6 gates, as
``bench/scale.py`` starts them, and ``--evaluations`` stored verdicts of each gate of each
rollout. Prometheus scrapes ``/metrics`` and operators open the web list in the leader's own
process, so their cost is taken from the ticks. Timed, median of ``--runs`` (wall and CPU
of this process, and the SQL statements run):

- the newest verdict of every gate of every rollout read one rollout at a time
  (``latest_evaluations``, as a scrape read them before): the baseline of the ratio column;
- the same read for all rollouts at once (``latest_of_rollouts``, as a scrape reads them now);
- a whole scrape (``DaemonMetrics.exposition``: the reads and the text Prometheus gets; no
  tick runs here, so it never pauses to give way to one);
- the web list page unfiltered (50 rollouts shown), and filtered by a state no rollout is in.

Every database is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench._common

from bench._common import add_server_option, print_results, scratch_database
from bench.scale import progress, start_rollouts
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.operations import plan_of
from rolloutd.store import queries
from rolloutd.store.db import make_engine, normalise_url, session_factory
from rolloutd.store.models import Rollout
from rolloutd.web.pages import index_page

BASELINE = "newest verdicts, a rollout at a time"


def store_evaluations(url: str, per_gate: int) -> None:
    """``per_gate`` passing verdicts of each gate of each rollout, a second apart."""
    raw = normalise_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(raw, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO gate_evaluations (rollout_id, step_index, gate, role, verdict, value,"
            " threshold, query, samples, reason, evidence, evaluated_at)"
            " SELECT r.id, 0, g, 'step', 'pass', 0.001, '<= 0.01', 'q', 5000, '', '{}',"
            " now() - make_interval(secs => k)"
            " FROM rollouts r, unnest(ARRAY['errors', 'timeouts', 'ttft', 'e2e', 'oom', 'xid'])"
            " AS g, generate_series(1, %s) AS k",
            (per_gate,),
        )
        connection.execute("ANALYZE")


def measure(url: str, runs: int) -> list[dict[str, Any]]:
    """Each read timed ``runs`` times on the database at ``url``."""
    engine = make_engine(url)
    sessions = session_factory(engine)
    ran = [0]
    event.listen(engine, "before_cursor_execute", lambda *_: ran.__setitem__(0, ran[0] + 1))
    now = datetime.now(UTC)
    metrics = DaemonMetrics(sessions, instance="bench", wall=lambda: now, leading=lambda: 1)

    def one_at_a_time() -> object:
        with sessions() as session:
            rollouts = session.query(Rollout).all()
            return [
                queries.latest_evaluations(session, r.id, gates=plan_of(r).gates) for r in rollouts
            ]

    def all_at_once() -> object:
        with sessions() as session:
            rollouts = session.query(Rollout).all()
            return queries.latest_of_rollouts(session, {r.id: plan_of(r).gates for r in rollouts})

    def page(**filters: str) -> Callable[[], object]:
        def read() -> object:
            with sessions() as session:
                return index_page(session, filters, now=now)

        return read

    reads: list[tuple[str, Callable[[], object]]] = [
        (BASELINE, one_at_a_time),
        ("newest verdicts, all rollouts at once", all_at_once),
        ("a whole /metrics scrape", metrics.exposition),
        ("web list, unfiltered", page()),
        ("web list, filtered by a state none is in", page(state="completed")),
    ]
    rows = []
    try:
        for name, read in reads:
            read()  # the plans parsed and the statements compiled, as in a running daemon
            walls, cpus = [], []
            for _ in range(runs):
                ran[0] = 0
                wall, cpu = time.perf_counter(), time.process_time()
                read()
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
            rows.append(
                {
                    "read": name,
                    "statements": ran[0],
                    "wall_ms": statistics.median(walls) * 1000,
                    "cpu_ms": statistics.median(cpus) * 1000,
                }
            )
    finally:
        engine.dispose()
    base = rows[0]["wall_ms"]
    for row in rows:
        row["vs_baseline"] = row["wall_ms"] / base if base else None
    return rows


def report(results: dict[str, Any]) -> None:
    """The table: one block of rows for each number of rollouts."""
    print(
        f"{results['evaluations']} verdicts stored per gate, 6 gates a rollout; "
        f"median of {results['runs']} runs"
    )
    print(f"{'rollouts':>8}  {'read':<42} {'statements':>10} {'wall ms':>9} {'CPU ms':>8} {'x':>6}")
    for n, rows in results["by_rollouts"].items():
        for row in rows:
            ratio = "" if row["vs_baseline"] is None else f"{row['vs_baseline']:.3f}"
            print(
                f"{n:>8}  {row['read']:<42} {row['statements']:>10} {row['wall_ms']:>9.1f} "
                f"{row['cpu_ms']:>8.1f} {ratio:>6}"
            )
    print(f"x: wall time against '{BASELINE}' at the same number of rollouts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", default="10,100,1000", help="comma-separated N")
    parser.add_argument("--evaluations", type=int, default=300, help="verdicts per gate")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", choices=["table", "json"], default="table")
    add_server_option(parser)
    args = parser.parse_args()
    results: dict[str, Any] = {"evaluations": args.evaluations, "runs": args.runs}
    results["by_rollouts"] = {}
    for n in [int(part) for part in args.rollouts.split(",")]:
        with tempfile.TemporaryDirectory() as workdir, scratch_database(args.server) as url:
            progress(f"{n} rollouts: starting them and storing their verdicts")
            start_rollouts(url, Path(workdir), n)
            store_evaluations(url, args.evaluations)
            progress(f"{n} rollouts: timing the reads")
            results["by_rollouts"][n] = measure(url, args.runs)
    print_results(results, args.output, report)


if __name__ == "__main__":
    main()
