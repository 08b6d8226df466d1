"""What the benchmarks that run real daemons on Postgres share: a scratch database, a
``rolloutd run`` process with its JSON-lines log, a plan on the ``file`` drivers, waiting on
a condition, the nearest-rank quantile, and results printed as a table or as JSON.

Imported by the bench scripts as ``bench._common`` (each puts the repository on the path).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import yaml

from rolloutd.store.db import normalise_url, upgrade
from tests.daemon.helpers import daemon_env, parse_log_events, spawn_rolloutd

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float) -> T:
    """Poll ``predicate`` until truthy; exit with ``what`` when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
    return value


def nearest_rank(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def print_results(results: T, output: str, report: Callable[[T], None]) -> None:
    """Print ``results`` as ``--output`` asks: ``json`` (a value JSON has no type for, such as
    a datetime, as its string), or ``table`` as ``report`` prints them."""
    if output == "json":
        print(json.dumps(results, indent=2, default=str))
    else:
        report(results)


# -- the scratch database ---------------------------------------------------------------------


def add_server_option(parser: argparse.ArgumentParser) -> None:
    """``--server``: the Postgres server the scratch database is made on."""
    parser.add_argument(
        "--server",
        default=os.environ.get("ROLLOUTD_TEST_PG", "postgresql:///postgres"),
        help="a Postgres server where this user may CREATE DATABASE",
    )


@contextmanager
def scratch_database(server: str) -> Iterator[str]:
    """A new database on ``server`` at the newest schema, its URL; dropped at the end (with
    every connection to it), however the block ends."""
    admin_url = normalise_url(server).set(drivername="postgresql")
    name = f"rolloutd_bench_{uuid.uuid4().hex[:8]}"
    admin = admin_url.render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        url = admin_url.set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- a daemon ---------------------------------------------------------------------------------


class DaemonProcess:
    """One ``rolloutd run`` as instance ``name`` on the database at ``url``, its JSON-lines
    log at ``log_path``, started as the tests start theirs; ``ttl`` is its lease TTL in
    seconds (None: the daemon's own), ``env`` more of its environment."""

    def __init__(
        self,
        name: str,
        url: str,
        log_path: Path,
        *,
        ttl: float | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = spawn_rolloutd({**daemon_env(url, name, ttl=ttl), **(env or {})}, self._log)

    def log_events(self, offset: int = 0) -> list[dict[str, Any]]:
        """The log's events from byte ``offset`` on (lines that are not JSON are skipped)."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return parse_log_events(log.read().decode(errors="replace"))

    def health_port(self, timeout: float) -> int:
        """The port of ``/healthz`` once the log names it; exit with the log if the process
        exits first."""

        def port() -> int | None:
            if self.proc.poll() is not None:
                raise SystemExit(f"rolloutd {self.name} exited while starting:\n{self.log_tail()}")
            for event in self.log_events():
                if event.get("event") == "health endpoint":
                    return int(str(event["url"]).rsplit(":", 1)[1].split("/")[0])
            return None

        return wait_for(port, timeout, f"rolloutd {self.name} to serve", 0.05)

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the process so far (0 once it is gone)."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 15) -> str:
        """The end of the log, for failure reports."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds (SIGKILL at
        once for a timeout of 0); close the log."""
        if self.proc.poll() is None:
            if timeout > 0:
                self.proc.terminate()
                with suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=timeout)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


# -- a rollout --------------------------------------------------------------------------------


def write_file_plan(directory: Path, name: str, *, every: str, bake: str) -> Path:
    """A plan ``name`` (its service too) in ``directory`` on the ``file`` router and ``file``
    metrics, with the metrics file reading no OOM: canary 5% baking for ``bake``, ticked
    ``every`` so long, rolled back by an OOM. Returns the plan's path."""
    metrics = directory / "metrics.json"
    metrics.write_text(json.dumps({"oom_events": {"canary": {"value": 0}}}))
    replica = "http://127.0.0.1:9"  # never called: the file drivers stand in for the fleet
    plan = {
        "name": name,
        "service": name,
        "environment": "staging",
        "pools": {
            "stable": {"replicas": [{"name": "s0", "url": replica}]},
            "canary": {"replicas": [{"name": "c0", "url": replica}]},
        },
        "router": {"driver": "file", "path": str(directory / "weights.json")},
        "metrics": {"source": "file", "path": str(metrics)},
        "artefacts": {"stable": "build-old", "canary": "build-new"},
        "interval": every,
        "trigger_interval": every,
        "gates": {"oom": {"kind": "events", "signal": "oom_events"}},
        "steps": [{"kind": "canary", "weight": 5, "bake": bake}],
        "rollback": {"triggers": ["oom"]},
    }
    path = directory / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path
