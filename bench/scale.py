"""What one leader costs as the number of active rollouts grows.

    python3 bench/scale.py [--rollouts 10,100,1000] [--minutes 3] [--settle 60]
                           [--output table|json] [--server postgresql:///postgres]

For each N: a scratch database on the Postgres server, N rollouts started in it, each with 6
gates (4 step gates and 2 rollback triggers), a step interval of 30 s and a trigger interval
of 10 s, a 48 h canary bake, on the ``file`` router and the ``file`` metrics source (every
signal reads a healthy value, so each tick judges every due gate and keeps the rollout
baking). One ``rolloutd run`` leads. Once every rollout's
canary weight is verified (or after a warm-up of at most ``--warmup`` minutes), the leader
settles for ``--settle`` seconds, then the window of ``--minutes`` is measured. (Every rollout
of the bench starts in the same second, so every one is verified within seconds of the others,
and a tick that wrote reads its rollout afresh on the next: right after the warm-up, the leader
re-reads 10,000 rollouts at once, a burst no fleet whose rollouts start apart ever sees.
``--settle 0`` measures from the warm-up's end.)

- the leader's CPU time over the window, as a share of one core (``/proc``), and its peak RSS
  (sampled every second); during the window ``/metrics`` is scraped every 15 s, as a
  Prometheus would, and each scrape's wall time (request to last byte) is reported;
- batch duration p50/p99 (a tick is a batch of up to 100 rollouts, one transaction) and the
  lag from each rollout's due time to the start of its batch p99, from the leader's own
  ``/metrics`` histograms (interpolated within buckets, as PromQL's ``histogram_quantile``
  does), and due times skipped because a rollout's previous batch still ran;
- round trips to the database per rollout-tick (statements, BEGINs, COMMITs and pre-pings,
  counted by the leader: ``rolloutd_store_round_trips_total``);
- the gaps between consecutive stored evaluations of each step gate (30 s is on time) and the
  share of them over 31 s;
- rows written per hour (inserted, updated and deleted rows, from ``pg_stat_user_tables``);
- after the window, the time from the tick that judged an OOM on the first rollout's canary
  (a rollback trigger, in its own metrics file) to its router file reading 0% canary: compare
  the smallest N with the largest.

Then, on the same database, the cold start of ``rolloutctl status ID`` and of
``rolloutctl list`` (median of 5 runs each), against ``python -c 'import sqlalchemy'``
measured alongside. The last table prints the growth from the smallest N to the largest as
ratios. Every database is dropped and every daemon stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench._common

from bench._common import DaemonProcess, add_server_option, print_results, scratch_database
from rolloutd.operations import start_rollout
from rolloutd.planfile import load_plan
from rolloutd.store.db import make_engine, normalise_url, session_factory, transaction

TRIGGER_EVERY = "10s"
STEP_EVERY = "30s"
SIGNALS = {
    "error_rate": 0.001,
    "queue_timeout_rate": 0.001,
    "ttft_p99": 0.5,
    "e2e_latency": 1.0,
    "oom_events": 0,
    "xid_errors": 0,
}
GATES = {
    "errors": {"kind": "threshold", "signal": "error_rate", "max": 0.01},
    "timeouts": {"kind": "threshold", "signal": "queue_timeout_rate", "max": 0.01},
    "ttft": {"kind": "threshold", "signal": "ttft_p99", "max": 2.0},
    "e2e": {"kind": "threshold", "signal": "e2e_latency", "max": 5.0},
    "oom": {"kind": "events", "signal": "oom_events"},
    "xid": {"kind": "events", "signal": "xid_errors"},
}
SAMPLE_SECONDS = 1.0
SCRAPE_SECONDS = 15.0
COLD_RUNS = 5


def progress(message: str) -> None:
    """A progress line on stderr, so that ``--output json`` stays clean."""
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def start_rollouts(url: str, workdir: Path, count: int) -> list[int]:
    """Start ``count`` rollouts of their own services, as ``rolloutctl start`` does."""
    metrics = workdir / "metrics.json"
    write_signals(metrics, SIGNALS)
    # The first rollout reads its own copy: the breach at the end is its alone.
    write_signals(workdir / "metrics-first.json", SIGNALS)
    engine = make_engine(url)
    sessions = session_factory(engine)
    ids = []
    try:
        with transaction(sessions) as session:
            for i in range(count):
                directory = workdir / f"scale-{i:04d}"
                directory.mkdir()
                plan = {
                    "name": directory.name,
                    "service": directory.name,
                    "environment": "staging",
                    "pools": {
                        "stable": {"replicas": [{"name": "s0", "url": "http://127.0.0.1:9"}]},
                        "canary": {"replicas": [{"name": "c0", "url": "http://127.0.0.1:9"}]},
                    },
                    "router": {"driver": "file", "path": str(directory / "weights.json")},
                    "metrics": {
                        "source": "file",
                        "path": str(workdir / "metrics-first.json" if i == 0 else metrics),
                    },
                    "artefacts": {"stable": "build-old", "canary": "build-new"},
                    "interval": STEP_EVERY,
                    "trigger_interval": TRIGGER_EVERY,
                    "gates": GATES,
                    "steps": [
                        {
                            "kind": "canary",
                            "weight": 5,
                            "bake": "48h",
                            "gates": ["errors", "timeouts", "ttft", "e2e"],
                        }
                    ],
                    "rollback": {"triggers": ["oom", "xid"]},
                }
                path = directory / "plan.yaml"
                path.write_text(yaml.safe_dump(plan, sort_keys=False))
                now = datetime.now(UTC)
                ids.append(start_rollout(session, load_plan(path), actor="bench", now=now))
    finally:
        engine.dispose()
    return ids


def write_signals(path: Path, signals: dict[str, float]) -> None:
    """The ``file`` metrics source's document: each signal's value on both pools."""
    document = {
        s: {p: {"value": v, "samples": 5000} for p in ("canary", "stable")}
        for s, v in signals.items()
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document))
    temporary.replace(path)


def breach_to_zero(
    leader: Leader, workdir: Path, first: int, timeout: float = 120.0
) -> float | None:
    """Seconds from the tick that judged an OOM on the first rollout's canary (a rollback
    trigger, in its own metrics file) until its router file read 0% canary; None if it did
    not within ``timeout``. The wait for that tick (up to a trigger interval) is left out:
    it is the schedule, the same at any N."""
    weights = workdir / "scale-0000" / "weights.json"
    write_signals(workdir / "metrics-first.json", {**SIGNALS, "oom_events": 1})
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if json.loads(weights.read_text()).get("canary_weight") == 0:
                at_zero = datetime.now(UTC)
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    else:
        return None
    judged = leader.value(
        "SELECT min(evaluated_at) FROM gate_evaluations WHERE rollout_id = "
        f"{int(first)} AND gate = 'oom' AND verdict IN ('breach', 'fail')"
    )
    return None if judged is None else (at_zero - judged).total_seconds()


def step_gate_gaps(leader: Leader, since: datetime) -> list[float]:
    """Seconds between consecutive stored evaluations of each step gate of each rollout
    (the gap a 30 s step-gate interval should show), from ``since`` on."""
    rows = leader.db.execute(
        "SELECT extract(epoch FROM evaluated_at - lag(evaluated_at) OVER "
        "(PARTITION BY rollout_id, gate ORDER BY evaluated_at)) FROM gate_evaluations "
        "WHERE role = 'step' AND evaluated_at >= %s",
        (since,),
    ).fetchall()
    return sorted(float(r[0]) for r in rows if r[0] is not None)


_OWN_SERIES = (
    "rolloutd_ticks_total",
    "rolloutd_ticks_missed_total",
    "rolloutd_store_round_trips_total",
    "rolloutd_tick_duration_seconds_",
    "rolloutd_tick_lag_seconds_",
)


class Leader:
    """The daemon under measurement, and what it and the database say about it."""

    def __init__(self, url: str, workdir: Path) -> None:
        # As systemd/rolloutd.service runs it: two malloc arenas (see the unit).
        self.daemon = DaemonProcess(
            "scale", url, workdir / "rolloutd.log", env={"MALLOC_ARENA_MAX": "2"}
        )
        self.db = psycopg.connect(
            normalise_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
        )
        self.port = self.daemon.health_port(60)

    def value(self, sql: str) -> Any:
        row = self.db.execute(sql).fetchone()
        return None if row is None else row[0]

    def verified(self) -> int:
        return int(
            self.value(
                "SELECT count(DISTINCT rollout_id) FROM events WHERE kind = 'weight_verified'"
            )
        )

    def metrics(self) -> dict[str, Any]:
        """Counters and histogram buckets from the daemon's ``/metrics``."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=60) as r:
            # Only the leader's own series: at 10,000 rollouts the page is some 90 MB of
            # per-rollout series, which the parser would take minutes over.
            text = "".join(
                line
                for line in r.read().decode().splitlines(keepends=True)
                if line.startswith(_OWN_SERIES)
            )
        found: dict[str, Any] = {
            "ticks": 0.0,
            "missed": 0.0,
            "trips": 0.0,
            "batches": 0.0,
            "duration": {},
            "lag": {},
        }
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "rolloutd_ticks_total":
                    found["ticks"] += sample.value
                elif sample.name == "rolloutd_ticks_missed_total":
                    found["missed"] += sample.value
                elif sample.name == "rolloutd_store_round_trips_total":
                    found["trips"] += sample.value
                elif sample.name == "rolloutd_tick_duration_seconds_count":
                    found["batches"] += sample.value
                elif sample.name == "rolloutd_tick_duration_seconds_bucket":
                    found["duration"][float(sample.labels["le"])] = sample.value
                elif sample.name == "rolloutd_tick_lag_seconds_bucket":
                    found["lag"][float(sample.labels["le"])] = sample.value
        return found

    def scrape(self) -> float:
        """One scrape of ``/metrics`` as Prometheus makes it: its wall time, in seconds."""
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=60) as r:
            r.read()
        return time.perf_counter() - started

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.daemon.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def rows_written(self) -> int:
        return int(
            self.value(
                "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) "
                "FROM pg_stat_user_tables"
            )
        )

    def close(self) -> None:
        self.db.close()
        self.daemon.stop()


class PeakRss:
    """The leader's largest RSS, sampled every second in a thread until :meth:`stop`."""

    def __init__(self, leader: Leader) -> None:
        self.leader = leader
        self.peak = leader.rss_mb()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopping.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, self.leader.rss_mb())

    def stop(self) -> float:
        self.stopping.set()
        self.thread.join()
        return max(self.peak, self.leader.rss_mb())


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The ``q`` quantile of the observations between two snapshots of a histogram's
    cumulative buckets, interpolated linearly within its bucket."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower  # beyond the last finite bucket: its lower edge
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def cold_start(args: list[str], env: dict[str, str]) -> float:
    """The median wall time of ``COLD_RUNS`` runs of a command, in seconds."""
    times = []
    for _ in range(COLD_RUNS):
        started = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr.decode()}")
    return statistics.median(times)


def measure(
    server: str, count: int, minutes: float, warmup: float, settle: float
) -> dict[str, Any]:
    """One N: start the rollouts and a leader, warm up, settle, measure a window."""
    with (
        tempfile.TemporaryDirectory(prefix="rolloutd-scale-") as tmp,
        scratch_database(server) as url,
    ):
        workdir = Path(tmp)
        progress(f"N={count}: starting {count} rollouts")
        ids = start_rollouts(url, workdir, count)
        leader = Leader(url, workdir)
        try:
            deadline = time.monotonic() + warmup * 60
            while (verified := leader.verified()) < count and time.monotonic() < deadline:
                time.sleep(1)
            progress(
                f"N={count}: {verified} of {count} canaries verified; settling {settle:g} s, "
                f"then measuring {minutes:g} min"
            )
            time.sleep(settle)
            first, rows0 = leader.metrics(), leader.rows_written()
            cpu0 = leader.daemon.cpu_seconds()
            window_start = datetime.now(UTC)
            started = time.monotonic()
            peak = PeakRss(leader)
            scrapes = []
            while time.monotonic() - started < minutes * 60:
                time.sleep(SCRAPE_SECONDS)
                scrapes.append(leader.scrape())
            last, cpu1 = leader.metrics(), leader.daemon.cpu_seconds()
            elapsed = time.monotonic() - started
            rss = peak.stop()
            time.sleep(1)  # Postgres reports its table statistics about once a second
            rows1 = leader.rows_written()
            gaps = step_gate_gaps(leader, window_start)
            to_zero = breach_to_zero(leader, workdir, ids[0])
            ticks = last["ticks"] - first["ticks"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTD_")}
            env.update(ROLLOUTD_DATABASE_URL=url, ROLLOUTD_ENV_FILE="/nonexistent")
            python = [sys.executable, "-c", "import sqlalchemy"]
            result = {
                "rollouts": count,
                "verified": verified,
                "window_s": round(elapsed, 1),
                "cpu_share": (cpu1 - cpu0) / elapsed,
                "rss_mb": rss,
                "scrapes": len(scrapes),
                "scrape_p50_s": statistics.median(scrapes) if scrapes else None,
                "scrape_max_s": max(scrapes, default=None),
                "ticks_per_s": ticks / elapsed,
                "trips_per_tick": (last["trips"] - first["trips"]) / ticks if ticks else None,
                "per_batch": ticks / (last["batches"] - first["batches"])
                if last["batches"] > first["batches"]
                else None,
                "gap_p50_s": gaps[len(gaps) // 2] if gaps else None,
                "gap_p99_s": gaps[int(len(gaps) * 0.99)] if gaps else None,
                "gaps_late": sum(g > 31.0 for g in gaps) / len(gaps) if gaps else None,
                "breach_to_zero_s": to_zero,
                "ticks_due_per_s": count / 10.0,
                "tick_p50_s": quantile(first["duration"], last["duration"], 0.5),
                "tick_p99_s": quantile(first["duration"], last["duration"], 0.99),
                "lag_p99_s": quantile(first["lag"], last["lag"], 0.99),
                "missed": last["missed"] - first["missed"],
                "rows_per_hour": (rows1 - rows0) / elapsed * 3600,
                "import_sqlalchemy_s": cold_start(python, env),
                "status_s": cold_start(["rolloutctl", "status", str(ids[-1])], env),
                "list_s": cold_start(["rolloutctl", "list"], env),
            }
        finally:
            leader.close()
    return result


def report(results: list[dict[str, Any]]) -> None:
    """The table of figures per N, and the growth from the smallest N to the largest."""

    def fmt(value: float | None, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    print(
        "| rollouts | verified | CPU (1 core) | RSS MB | scrape p50/max | ticks/s (due) "
        "| per batch | batch p50 "
        "| batch p99 "
        "| lag p99 | missed | round trips/tick | step-gate gap p50/p99 (late) | breach → 0% "
        "| rows/h | status cold | list | import sqlalchemy |"
    )
    print("|---:" * 18 + "|")
    for r in results:
        print(
            f"| {r['rollouts']:,} | {r['verified']:,} | {r['cpu_share']:.1%} "
            f"| {r['rss_mb']:.0f} "
            f"| {fmt(r['scrape_p50_s'], '.2f')}/{fmt(r['scrape_max_s'], '.2f')} s "
            f"| {r['ticks_per_s']:.1f} ({r['ticks_due_per_s']:.1f}) "
            f"| {fmt(r['per_batch'], '.1f')} "
            f"| {fmt(r['tick_p50_s'], '.3f')} s | {fmt(r['tick_p99_s'], '.3f')} s "
            f"| {fmt(r['lag_p99_s'], '.2f')} s | {r['missed']:.0f} "
            f"| {fmt(r['trips_per_tick'], '.3f')} "
            f"| {fmt(r['gap_p50_s'], '.1f')}/{fmt(r['gap_p99_s'], '.1f')} s "
            f"({fmt(r['gaps_late'], '.1%')}) | {fmt(r['breach_to_zero_s'], '.2f')} s "
            f"| {r['rows_per_hour']:,.0f} "
            f"| {r['status_s']:.2f} s ({r['status_s'] / r['import_sqlalchemy_s']:.1f}x) "
            f"| {r['list_s']:.2f} s | {r['import_sqlalchemy_s']:.2f} s |"
        )
    if len(results) > 1:
        low, high = results[0], results[-1]
        n = high["rollouts"] / low["rollouts"]
        print()
        print(f"growth from {low['rollouts']:,} to {high['rollouts']:,} rollouts ({n:g}x):")
        for key, name in (
            ("cpu_share", "CPU"),
            ("rows_per_hour", "rows written"),
            ("rss_mb", "RSS"),
        ):
            ratio = high[key] / low[key] if low[key] else float("nan")
            verdict = "linear or better" if ratio <= n else "worse than linear"
            print(f"  {name}: {ratio:.1f}x ({verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", default="10,100,1000", help="comma-separated Ns")
    parser.add_argument("--minutes", type=float, default=3.0, help="measured window per N")
    parser.add_argument("--warmup", type=float, default=5.0, help="warm-up limit, minutes")
    parser.add_argument(
        "--settle", type=float, default=60.0, help="seconds between the warm-up and the window"
    )
    parser.add_argument("--output", choices=["table", "json"], default="table")
    add_server_option(parser)
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.rollouts.split(",")]
    except ValueError:
        parser.error(f"--rollouts: expected numbers separated by commas, got {args.rollouts!r}")
    if any(n < 1 for n in counts) or args.minutes <= 0 or args.warmup < 0 or args.settle < 0:
        parser.error(
            "--rollouts must be positive, --minutes above 0, --warmup and --settle 0 or more"
        )
    results = [measure(args.server, n, args.minutes, args.warmup, args.settle) for n in counts]
    print_results(results, args.output, report)


if __name__ == "__main__":
    main()
