"""How long an operator command takes to act when the next tick is a minute away (NOTIFY).

    python3 bench/command_latency.py [--commands 50] [--server postgresql:///postgres]

Creates a scratch database on the server, starts a leader and a standby ``rolloutd run``
(production lease settings), and starts one rollout whose plan ticks every 60 s. Then it
alternates ``pause`` and ``resume`` commands, written exactly as ``rolloutctl`` writes them
(the command row and its NOTIFY in one transaction), and times each from its commit until
the rollout's state has changed. ``rolloutctl``'s own start-up (an interpreter and imports)
is left out: it is the same with or without NOTIFY. The second row is the part until the
tick that applied the command began (its ``handled_at`` is that tick's clock reading), as
stamped by the two processes themselves: the rest is the tick's own work. Without NOTIFY
a command would wait for the next tick: uniformly 0-60 s, so half the interval on average.
The database is dropped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import yaml

from rolloutd.operations import start_rollout, submit_command
from rolloutd.planfile import load_plan
from rolloutd.store.db import make_engine, normalise_url, session_factory, transaction, upgrade

TICK_SECONDS = 60


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float) -> Any:
    """Poll ``predicate`` until truthy; exit with ``what`` when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
    return value


def write_plan(workdir: Path) -> Path:
    """A rollout that stays at its first step: a one-hour bake, ticked every 60 s."""
    plan = {
        "name": "bench",
        "service": "bench",
        "environment": "staging",
        "pools": {
            "stable": {"replicas": [{"name": "s0", "url": "http://127.0.0.1:9"}]},
            "canary": {"replicas": [{"name": "c0", "url": "http://127.0.0.1:9"}]},
        },
        "router": {"driver": "file", "path": str(workdir / "weights.json")},
        "metrics": {"source": "file", "path": str(workdir / "metrics.json")},
        "artefacts": {"stable": "build-old", "canary": "build-new"},
        "interval": f"{TICK_SECONDS}s",
        "trigger_interval": f"{TICK_SECONDS}s",
        "gates": {"oom": {"kind": "events", "signal": "oom_events"}},
        "steps": [{"kind": "canary", "weight": 5, "bake": "1h"}],
        "rollback": {"triggers": ["oom"]},
    }
    (workdir / "metrics.json").write_text(json.dumps({"oom_events": {"canary": {"value": 0}}}))
    path = workdir / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


class Daemon:
    """One ``rolloutd run`` with its log in ``workdir``."""

    def __init__(self, name: str, url: str, workdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTD_")}
        env.update(
            ROLLOUTD_DATABASE_URL=url, ROLLOUTD_ENV_FILE="/nonexistent", ROLLOUTD_INSTANCE_NAME=name
        )
        self.log_path = workdir / f"rolloutd-{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            ["rolloutd", "run", "--health-port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def logged(self, event: str) -> bool:
        """Whether the log has an event named ``event``."""
        for raw in self.log_path.read_text(errors="replace").splitlines():
            try:
                if json.loads(raw).get("event") == event:
                    return True
            except (ValueError, AttributeError):
                continue
        return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def nearest_rank(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def stats(values: list[float]) -> list[float]:
    """Median, p90 and max."""
    return [statistics.median(values), nearest_rank(values, 0.9), max(values)]


def measure(url: str, workdir: Path, commands: int) -> tuple[list[float], list[float]]:
    """Start the daemons and the rollout; time ``commands`` commands; return both timings."""
    daemons = [Daemon("bench-a", url, workdir), Daemon("bench-b", url, workdir)]
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        wait_for(lambda: any(d.logged("leading") for d in daemons), 60, "a leader", 0.05)
        with transaction(sessions) as session:
            loaded = load_plan(write_plan(workdir))
            rollout = start_rollout(session, loaded, actor="bench", now=datetime.now(UTC))
        conninfo = normalise_url(url).set(drivername="postgresql")
        with psycopg.connect(
            conninfo.render_as_string(hide_password=False), autocommit=True
        ) as poller:

            def state() -> str:
                row = poller.execute("SELECT state FROM rollouts WHERE id = %s", (rollout,))
                return str(row.fetchone()[0])  # type: ignore[index]

            wait_for(lambda: state() == "running", 30, "the rollout to start", 0.05)
            observed, stamped = [], []
            for i in range(commands):
                kind, expected = ("pause", "paused") if i % 2 == 0 else ("resume", "running")
                with transaction(sessions) as session:
                    command = submit_command(
                        session, rollout, kind, actor="bench", reason=None, now=datetime.now(UTC)
                    )
                committed = time.monotonic()
                wait_for(lambda e=expected: state() == e, 2 * TICK_SECONDS, kind, 0.002)
                observed.append(time.monotonic() - committed)
                row = poller.execute(
                    "SELECT handled_at - created_at FROM commands WHERE id = %s", (command,)
                ).fetchone()
                stamped.append(row[0].total_seconds())  # type: ignore[index]
                print(f"  {i + 1:>2} {kind:<6} {observed[-1] * 1000:7.1f} ms", file=sys.stderr)
        return observed, stamped
    except BaseException:
        for daemon in daemons:
            tail = daemon.log_path.read_text(errors="replace").splitlines()[-10:]
            print(f"--- {daemon.log_path.name}\n" + "\n".join(tail), file=sys.stderr)
        raise
    finally:
        for daemon in daemons:
            daemon.stop()
        engine.dispose()


def main() -> None:
    """Create the scratch database, measure, print the table, drop the database."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=50)
    parser.add_argument(
        "--server",
        default=os.environ.get("ROLLOUTD_TEST_PG", "postgresql:///postgres"),
        help="a Postgres server where this user may CREATE DATABASE",
    )
    args = parser.parse_args()

    admin_url = normalise_url(args.server).set(drivername="postgresql")
    name = f"rolloutd_bench_{uuid.uuid4().hex[:8]}"
    url = admin_url.set(database=name).render_as_string(hide_password=False)
    admin = admin_url.render_as_string(hide_password=False)
    started = time.monotonic()
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        upgrade(url)
        with tempfile.TemporaryDirectory(prefix="rolloutd-bench-") as workdir:
            observed, stamped = measure(url, Path(workdir), args.commands)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    rows = [
        ("with NOTIFY: commit to new state", stats(observed)),
        ("  of which until the tick began", stats(stamped)),
        # Uniform over the tick interval: median and mean half of it, p90 0.9 of it.
        (
            f"without NOTIFY: next {TICK_SECONDS} s tick",
            [0.5 * TICK_SECONDS, 0.9 * TICK_SECONDS, TICK_SECONDS],
        ),
    ]
    print(
        f"\ncommand -> effect, {len(observed)} commands (pause/resume alternating),"
        f" tick interval {TICK_SECONDS} s, {time.monotonic() - started:.0f} s wall"
    )
    print(f"{'':<34} {'median':>9} {'p90':>9} {'max':>9}")
    for label, cells in rows:
        print(f"{label:<34} " + " ".join(f"{v:>8.3f}s" for v in cells))
    print("(without NOTIFY: expected, not measured; a command waits for the next tick)")


if __name__ == "__main__":
    main()
