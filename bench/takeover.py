"""How long a standby takes to lead when the leader dies or stops, and whether the lease holds
under load.

    python3 bench/takeover.py [--rounds 20] [--minutes 10] [--rollouts 200] [--ttl SECONDS]
                              [--output table|json] [--server postgresql:///postgres]

Creates a scratch database on the server, migrates it to the newest schema and starts
two ``rolloutd run`` instances on it, a leader and a standby, with the lease TTL given (default:
the daemon's own). Every rollout uses the ``file`` router and the ``file`` metrics source (one
JSON file per rollout that reads 0 OOM events), so nothing but Postgres is needed: it sits in a
24 h canary bake while its OOM rollback trigger is evaluated every 1 s, and each such tick
commits the rollout (a new revision) and one gate evaluation.

1. ``--rounds`` times, with one rollout ticking: SIGKILL the leader at a random point of its 1 s
   main loop, and time until the standby's ``/healthz`` says ``leader``, until its
   ``leader_acquired`` event is committed, and until its first tick is committed (a gate
   evaluation dated after that event). The first two rows split the takeover by the daemons'
   own stamps: from the kill until the dead leader's lease expired (the TTL less the age of its
   last renewal), then until the standby took the lease (its next loop turn). The killed
   instance is started again as the new standby before the next round.
2. The same with SIGTERM, which releases the lease on the way out (the ``leader_released``
   event's stamp), so the standby takes it on its next loop turn instead of after the TTL.
3. ``--rollouts`` rollouts ticking for ``--minutes`` with both instances up: the lease row is
   read every second. Its epoch changes only when an instance takes the lease, so any change is
   a takeover (the goal is none); the age of its last renewal shows how close the leader came
   to losing it. Ticks per second and their mean duration come from both instances'
   ``/metrics`` (``rolloutd_ticks_total``, ``rolloutd_tick_duration_seconds``) read at both ends
   of the window, gate evaluations and connections made from the database, CPU time from
   ``/proc``.

Every daemon is killed and the database dropped at the end, however the run ends (Ctrl-C too).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg.rows import dict_row
from sqlalchemy import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench._common

from bench._common import (
    DaemonProcess,
    add_server_option,
    nearest_rank,
    print_results,
    scratch_database,
    wait_for,
    write_file_plan,
)
from rolloutd.operations import start_rollout
from rolloutd.planfile import load_plan
from rolloutd.settings import Settings
from rolloutd.store.db import make_engine, normalise_url, session_factory, transaction

DEFAULT_TTL = float(Settings.model_fields["lease_ttl_seconds"].default)
TRIGGER_SECONDS = 1
TRIGGER_EVERY = f"{TRIGGER_SECONDS}s"
POLL_SECONDS = 0.01  # while timing a takeover
SAMPLE_SECONDS = 1.0  # while watching the lease under load
PROGRESS_SECONDS = 30.0
START_TIMEOUT = 30.0


def progress(message: str) -> None:
    """One line of progress on stderr (stdout carries the table)."""
    print(message, file=sys.stderr, flush=True)


# -- the daemons ------------------------------------------------------------------------------


class Daemon(DaemonProcess):
    """One ``rolloutd run`` with its JSON-lines log in ``workdir`` and its ``/healthz``."""

    def __init__(self, name: str, url: str, workdir: Path, ttl: float, generation: int) -> None:
        # The instance's backends are recognisable in pg_stat_activity.
        url = (
            make_url(url)
            .update_query_dict({"application_name": f"rolloutd-{name}"})
            .render_as_string(hide_password=False)
        )
        log_path = workdir / f"rolloutd-{name}-{generation}.log"
        super().__init__(name, url, log_path, ttl=ttl)
        self.actor = f"rolloutd@{name}"
        self.port: int | None = None

    def wait_serving(self) -> Daemon:
        """Wait until ``/healthz`` answers; exit with the log if the process exits first."""
        self.port = self.health_port(START_TIMEOUT)
        wait_for(self.role, 5.0, f"rolloutd {self.name} to answer /healthz", 0.05)
        return self

    def get(self, path: str, timeout: float) -> bytes | None:
        """The body of ``GET path`` (any status), or None when nothing answers."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}{path}", timeout=timeout
            ) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            return bytes(exc.read())
        except OSError:
            return None

    def role(self) -> str | None:
        """``leader`` or ``standby`` as ``/healthz`` says, or None when it does not answer."""
        body = self.get("/healthz", timeout=1.0)
        try:
            return None if body is None else str(json.loads(body)["role"])
        except (ValueError, KeyError):
            return None

    def close(self) -> None:
        """SIGKILL it if it still runs; close the log."""
        self.stop(timeout=0)


class Pair:
    """The two instances; a stopped one is started again under its name."""

    def __init__(self, url: str, workdir: Path, ttl: float) -> None:
        self.url, self.workdir, self.ttl = url, workdir, ttl
        self.spawned: list[Daemon] = []
        self.live: dict[str, Daemon] = {}

    def start(self, name: str) -> Daemon:
        """Start ``rolloutd run`` as instance ``name`` and wait until it serves ``/healthz``."""
        daemon = Daemon(name, self.url, self.workdir, self.ttl, len(self.spawned))
        self.spawned.append(daemon)
        self.live[name] = daemon
        return daemon.wait_serving()

    def roles(self) -> tuple[Daemon, Daemon]:
        """(leader, standby), once their ``/healthz`` say so."""

        def split() -> tuple[Daemon, Daemon] | None:
            roles = {daemon.role(): daemon for daemon in self.live.values()}
            if len(roles) == 2 and "leader" in roles and "standby" in roles:
                return roles["leader"], roles["standby"]
            return None

        return wait_for(split, 2 * self.ttl + START_TIMEOUT, "a leader and a standby", 0.05)

    def check_alive(self) -> None:
        """Exit with its log when an instance has died by itself."""
        for daemon in self.live.values():
            if daemon.proc.poll() is not None:
                raise SystemExit(
                    f"rolloutd {daemon.name} exited with {daemon.proc.returncode}:\n"
                    + daemon.log_tail()
                )

    def close(self) -> None:
        """Kill every instance ever started that still runs."""
        for daemon in self.spawned:
            daemon.close()


# -- the database -----------------------------------------------------------------------------


class Db:
    """The bench's own connection to the scratch database, and rollouts started on it."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url, self.workdir = url, workdir
        dsn = normalise_url(url).set(drivername="postgresql")
        self.connection = psycopg.connect(
            dsn.render_as_string(hide_password=False), autocommit=True, row_factory=dict_row
        )
        self.engine = make_engine(url)
        self.sessions = session_factory(self.engine)
        self.started = 0

    def row(self, sql: str, **params: Any) -> dict[str, Any] | None:
        """The first row of a query, or None."""
        return self.connection.execute(sql, params).fetchone()

    def value(self, sql: str, **params: Any) -> Any:
        """The one value of a query."""
        found = self.row(sql, **params)
        return None if found is None else next(iter(found.values()))

    def start_rollout(self) -> int:
        """Start one more rollout (as ``rolloutctl start`` does) on its own service."""
        name = f"bench-{self.started:04d}"
        self.started += 1
        directory = self.workdir / name
        directory.mkdir()
        path = write_file_plan(directory, name, every=TRIGGER_EVERY, bake="24h")
        with transaction(self.sessions) as session:
            return start_rollout(session, load_plan(path), actor="bench", now=datetime.now(UTC))

    def verified(self) -> int:
        """How many rollouts have had their canary weight read back from the router."""
        return int(
            self.value(
                "SELECT count(DISTINCT rollout_id) FROM events WHERE kind = 'weight_verified'"
            )
        )

    def close(self) -> None:
        """Close the connections."""
        self.connection.close()
        self.engine.dispose()


# -- 1 and 2: takeovers -----------------------------------------------------------------------

BASELINE = """
SELECT (SELECT coalesce(max(id), 0) FROM events) AS event,
       (SELECT coalesce(max(id), 0) FROM gate_evaluations) AS evaluation,
       (SELECT epoch FROM leases WHERE name = 'leader') AS epoch
"""
# The new leader's acquisition, and whether a tick of it has committed: its evaluations are
# dated after the acquisition, the old leader's (a SIGTERM lets the tick in flight finish)
# before its release, which the acquisition follows.
ACQUIRED = """
SELECT e.at, e.actor,
       EXISTS (SELECT 1 FROM gate_evaluations g
               WHERE g.id > %(evaluation)s AND g.evaluated_at >= e.at) AS ticked
FROM events e
WHERE e.rollout_id IS NULL AND e.kind = 'leader_acquired' AND e.id > %(event)s
ORDER BY e.id LIMIT 1
"""


def takeover(pair: Pair, db: Db, how: signal.Signals) -> tuple[dict[str, float], list[str]]:
    """Stop the leader with ``how``; the round's timings in seconds, and what went wrong."""
    leader, standby = pair.roles()
    time.sleep(random.uniform(0.0, 1.0))  # anywhere in the leader's 1 s main loop
    base = db.row(BASELINE)
    assert base is not None
    signalled_wall = datetime.now(UTC)
    signalled = time.monotonic()
    leader.proc.send_signal(how)
    seen: dict[str, float] = {}
    lease_end: datetime | None = None
    if how is signal.SIGKILL:
        leader.proc.wait(timeout=10)
        seen["exited"] = time.monotonic() - signalled
        # Final now that nothing renews it; the standby cannot take it before it expires.
        lease_end = db.value("SELECT expires_at FROM leases WHERE name = 'leader'")
    acquired: dict[str, Any] | None = None
    deadline = (pair.ttl if how is signal.SIGKILL else 0.0) + START_TIMEOUT
    while len(seen) < 4:
        if time.monotonic() - signalled > deadline:
            missing = {"exited", "healthz", "acquired", "ticked"} - set(seen)
            raise SystemExit(
                f"{how.name}: still waiting for {sorted(missing)} after {deadline:g} s\n"
                f"--- {leader.name}\n{leader.log_tail()}\n--- {standby.name}\n{standby.log_tail()}"
            )
        if "exited" not in seen and leader.proc.poll() is not None:
            seen["exited"] = time.monotonic() - signalled
        if "healthz" not in seen and standby.role() == "leader":
            seen["healthz"] = time.monotonic() - signalled
        if "ticked" not in seen:
            acquired = db.row(ACQUIRED, event=base["event"], evaluation=base["evaluation"])
            if acquired is not None:
                seen.setdefault("acquired", time.monotonic() - signalled)
                if acquired["ticked"]:
                    seen["ticked"] = time.monotonic() - signalled
        time.sleep(POLL_SECONDS)
    assert acquired is not None

    problems = []
    if how is signal.SIGTERM:
        lease_end = db.value(
            "SELECT at FROM events WHERE rollout_id IS NULL AND kind = 'leader_released'"
            " AND actor = %(actor)s AND id > %(event)s",
            actor=leader.actor,
            event=base["event"],
        )
        if leader.proc.returncode != 0:
            problems.append(f"SIGTERM: {leader.name} exited with {leader.proc.returncode}")
    if acquired["actor"] != standby.actor:
        problems.append(f"{how.name}: {acquired['actor']} took the lease, not {standby.actor}")
    epoch = db.value("SELECT epoch FROM leases WHERE name = 'leader'")
    if epoch != base["epoch"] + 1:
        problems.append(f"{how.name}: epoch {base['epoch']} -> {epoch}, not one step")
    timings = {**seen, "to_end": math.nan, "end_to_acquired": math.nan}
    if lease_end is None:
        problems.append(f"{how.name}: {leader.name} recorded no release of its lease")
    else:
        timings["to_end"] = (lease_end - signalled_wall).total_seconds()
        timings["end_to_acquired"] = (acquired["at"] - lease_end).total_seconds()

    leader.close()
    pair.start(leader.name)
    return timings, problems


def takeovers(pair: Pair, db: Db, how: signal.Signals, rounds: int) -> dict[str, Any]:
    """``rounds`` takeovers by ``how``: every timing of every round, and the problems seen."""
    timings: dict[str, list[float]] = {}
    problems: list[str] = []
    for index in range(rounds):
        found, wrong = takeover(pair, db, how)
        for key, seconds in found.items():
            timings.setdefault(key, []).append(seconds)
        problems += wrong
        progress(
            f"{how.name} {index + 1:>2}/{rounds}: /healthz leader after {found['healthz']:6.2f} s,"
            f" first tick after {found['ticked']:6.2f} s" + "".join(f"; {p}" for p in wrong)
        )
    return {"timings": timings, "problems": problems}


# -- 3: the lease under load ------------------------------------------------------------------


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU time of the whole machine so far, every core, in clock ticks."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    total = sum(ticks[:8])  # guest time is counted in user already
    return total - idle, total


def tick_counters(daemons: Iterable[Daemon]) -> dict[str, float]:
    """The instances' tick counters from ``/metrics``, summed: outcomes, and duration."""
    found: dict[str, float] = {"ok": 0.0, "not_leading": 0.0, "error": 0.0, "seconds": 0.0}
    for daemon in daemons:
        body = daemon.get("/metrics", timeout=60.0)
        if body is None:
            raise SystemExit(f"rolloutd {daemon.name} does not serve /metrics")
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                if sample.name == "rolloutd_ticks_total":
                    found[sample.labels["outcome"]] += sample.value
                elif sample.name == "rolloutd_tick_duration_seconds_sum":
                    found["seconds"] += sample.value
    return found


def snapshot(pair: Pair, db: Db) -> dict[str, Any]:
    """Everything the window's figures are differences of."""
    return {
        "at": time.monotonic(),
        "ticks": tick_counters(pair.live.values()),
        "cpu": {d.name: d.cpu_seconds() for d in pair.live.values()},
        # Counted as each connection is made: a pool that churns shows here.
        "sessions": db.value(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ),
        "machine": machine_busy(),
        "evaluation": db.value("SELECT coalesce(max(id), 0) FROM gate_evaluations"),
        "epoch": db.value("SELECT epoch FROM leases WHERE name = 'leader'"),
        "logs": {d.name: d.log_path.stat().st_size for d in pair.live.values()},
    }


def under_load(pair: Pair, db: Db, rollouts: int, minutes: float) -> dict[str, Any]:
    """Tick ``rollouts`` rollouts for ``minutes``; the lease's and the ticks' figures."""
    while db.started < rollouts:
        db.start_rollout()
    last = 0.0

    def all_verified() -> bool:
        nonlocal last
        done = db.verified()
        if time.monotonic() - last > 10:
            progress(f"load: {done}/{rollouts} rollouts at their canary weight")
            last = time.monotonic()
        return done >= rollouts

    wait_for(all_verified, 60 + 2 * rollouts, "every rollout to reach its canary weight", 1.0)
    leader, standby = pair.roles()
    before = snapshot(pair, db)
    window = 60 * minutes
    oldest_renewal = 0.0
    epochs = [before["epoch"]]
    next_progress = before["at"] + PROGRESS_SECONDS
    while (now := time.monotonic()) < before["at"] + window:
        pair.check_alive()
        lease = db.row(
            "SELECT epoch, extract(epoch FROM clock_timestamp() - renewed_at)::float AS age"
            " FROM leases WHERE name = 'leader'"
        )
        assert lease is not None
        oldest_renewal = max(oldest_renewal, lease["age"])
        if lease["epoch"] != epochs[-1]:
            epochs.append(lease["epoch"])
            progress(f"load: the lease epoch changed to {lease['epoch']}")
        if now >= next_progress:
            progress(
                f"load: {now - before['at']:4.0f}/{window:.0f} s, epoch changes"
                f" {len(epochs) - 1}, lease renewed at most {oldest_renewal:.2f} s ago"
            )
            next_progress += PROGRESS_SECONDS
        time.sleep(SAMPLE_SECONDS)
    after = snapshot(pair, db)

    elapsed = after["at"] - before["at"]
    ticks = {k: after["ticks"][k] - before["ticks"][k] for k in before["ticks"]}
    busy = after["machine"][0] - before["machine"][0]
    total = after["machine"][1] - before["machine"][1]
    complaints: Counter[str] = Counter()
    for daemon in pair.live.values():
        for event in daemon.log_events(before["logs"].get(daemon.name, 0)):
            if event.get("level") in ("warning", "error", "critical"):
                complaints[str(event.get("event"))] += 1
    return {
        "rollouts": rollouts,
        "seconds": elapsed,
        "epoch_changes": after["epoch"] - before["epoch"],
        "epochs_seen": epochs,
        "oldest_renewal_seconds": oldest_renewal,
        "ticks_per_second": ticks["ok"] / elapsed,
        "ticks_due_per_second": rollouts / TRIGGER_SECONDS,
        "evaluations_per_second": (after["evaluation"] - before["evaluation"]) / elapsed,
        "mean_tick_seconds": ticks["seconds"]
        / max(sum(ticks[k] for k in ticks if k != "seconds"), 1),
        "ticks_not_leading": ticks["not_leading"],
        "ticks_failed": ticks["error"],
        "leader_cpu": (after["cpu"][leader.name] - before["cpu"][leader.name]) / elapsed,
        "standby_cpu": (after["cpu"][standby.name] - before["cpu"][standby.name]) / elapsed,
        "sessions_per_second": (after["sessions"] - before["sessions"]) / elapsed,
        "machine_busy": busy / total if total else math.nan,
        "warnings": dict(complaints),
    }


# -- the report -------------------------------------------------------------------------------


def stats(values: list[float]) -> dict[str, float]:
    """Median, p90 and max (NaN when a round had no value)."""
    if not values or any(math.isnan(v) for v in values):
        return {"median": math.nan, "p90": math.nan, "max": math.nan}
    return {
        "median": statistics.median(values),
        "p90": nearest_rank(values, 0.9),
        "max": max(values),
    }


ROWS = {
    "SIGKILL": [
        ("to_end", "kill -> its lease expires (stamps)"),
        ("end_to_acquired", "expired -> standby takes it (stamps)"),
        ("healthz", "kill -> standby's /healthz says leader"),
        ("acquired", "kill -> leader_acquired committed"),
        ("ticked", "kill -> new leader's first tick committed"),
    ],
    "SIGTERM": [
        ("to_end", "SIGTERM -> lease released (stamps)"),
        ("end_to_acquired", "released -> standby takes it (stamps)"),
        ("healthz", "SIGTERM -> standby's /healthz says leader"),
        ("acquired", "SIGTERM -> leader_acquired committed"),
        ("ticked", "SIGTERM -> new leader's first tick committed"),
        ("exited", "SIGTERM -> old leader exited"),
    ],
}


def report(result: dict[str, Any]) -> None:
    """Print the table."""
    ttl, load = result["ttl_seconds"], result["load"]
    cores = result["cpu_cores"]
    print(
        f"\nleader takeover, lease TTL {ttl:g} s{' (the default)' if ttl == DEFAULT_TTL else ''},"
        f" 1 rollout ticking every {TRIGGER_EVERY}, {result['rounds']} rounds per signal;"
        f" {result['wall_seconds']:.0f} s wall in all"
    )
    print(f"({cores} CPU cores, shared with other work: timings include that contention)\n")
    print(f"{'seconds':<46} {'median':>7} {'p90':>7} {'max':>7}")
    for how, rows in ROWS.items():
        print(f"after {how} of the leader")
        for key, label in rows:
            cells = result["takeover"][how]["stats"][key]
            print(
                f"  {label:<44} " + " ".join(f"{cells[c]:>7.2f}" for c in ("median", "p90", "max"))
            )
    minutes = load["seconds"] / 60
    print(
        f"\nthe lease under load: {load['rollouts']} rollouts, trigger every {TRIGGER_EVERY},"
        f" {minutes:.1f} min, leader + standby, TTL {ttl:g} s"
    )
    warnings = ", ".join(f"{k} x{v}" for k, v in sorted(load["warnings"].items())) or "none"
    lines = [
        ("lease epoch changes (goal 0)", f"{load['epoch_changes']}"),
        ("longest since a renewal (1 s samples)", f"{load['oldest_renewal_seconds']:.2f} s"),
        (
            "ticks per second (/metrics)",
            f"{load['ticks_per_second']:.1f} of {load['ticks_due_per_second']:.0f} due",
        ),
        ("gate evaluations committed per second", f"{load['evaluations_per_second']:.1f}"),
        ("mean tick duration", f"{load['mean_tick_seconds'] * 1000:.0f} ms"),
        (
            "ticks not leading / failed",
            f"{load['ticks_not_leading']:.0f} / {load['ticks_failed']:.0f}",
        ),
        ("leader CPU", f"{100 * load['leader_cpu']:.0f}% of one core"),
        ("Postgres connections opened per second", f"{load['sessions_per_second']:.1f}"),
        ("standby CPU", f"{100 * load['standby_cpu']:.0f}% of one core"),
        ("whole machine busy", f"{100 * load['machine_busy']:.0f}% of {cores} cores (all work)"),
        ("daemon warnings/errors in the window", warnings),
    ]
    for label, value in lines:
        print(f"  {label:<44} {value}")
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")


def interrupted(_signum: int, _frame: FrameType | None) -> None:
    """SIGTERM to the bench cleans up as Ctrl-C does."""
    raise KeyboardInterrupt


def main() -> None:
    """Create the scratch database, measure, print the table, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="takeovers per signal")
    parser.add_argument("--minutes", type=float, default=10.0, help="the window under load")
    parser.add_argument("--rollouts", type=int, default=200, help="rollouts ticking under load")
    parser.add_argument("--ttl", type=float, default=DEFAULT_TTL, help="the lease TTL, seconds")
    parser.add_argument("--output", choices=["table", "json"], default="table")
    add_server_option(parser)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupted)
    # A shell without job control starts background jobs with SIGINT ignored; Ctrl-C must count.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    started = time.monotonic()
    result: dict[str, Any] = {"ttl_seconds": args.ttl, "rounds": args.rounds, "takeover": {}}
    try:
        with (
            scratch_database(args.server) as url,
            tempfile.TemporaryDirectory(prefix="rolloutd-bench-") as workdir,
        ):
            pair = Pair(url, Path(workdir), args.ttl)
            db = Db(url, Path(workdir))
            try:
                pair.start("bench-a")
                pair.start("bench-b")
                db.start_rollout()
                wait_for(db.verified, START_TIMEOUT, "the rollout to reach its weight", 0.1)
                problems = []
                for how in (signal.SIGKILL, signal.SIGTERM):
                    found = takeovers(pair, db, how, args.rounds)
                    problems += found["problems"]
                    result["takeover"][how.name] = {
                        "timings": found["timings"],
                        "stats": {key: stats(v) for key, v in found["timings"].items()},
                    }
                result["load"] = under_load(pair, db, args.rollouts, args.minutes)
                result["problems"] = problems
            finally:
                pair.close()
                db.close()
    except KeyboardInterrupt:
        raise SystemExit("interrupted: every daemon killed, the scratch database dropped") from None
    result["wall_seconds"] = time.monotonic() - started
    result["cpu_cores"] = os.cpu_count()
    print_results(result, args.output, report)


if __name__ == "__main__":
    main()
