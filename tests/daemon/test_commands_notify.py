"""Operator commands reach the leader through Postgres LISTEN/NOTIFY, and survive a restart of it.

The latency of a command is measured properly (median of 50) by bench/command_latency.py;
here it only has to be far below the 60 s tick interval of the plan.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rolloutd.planfile import load_plan
from tests.deploy.helpers import pin_and_drill
from tests.required import missing

from .helpers import (
    FULL,
    PAUSE,
    WAIT,
    Daemon,
    Daemons,
    Db,
    Workspace,
    canary,
    daemon_env,
    quiet_rollout,
    start_rollout_in,
    wait_until,
)

pytestmark = pytest.mark.postgres

COMMAND_DEADLINE = 5.0  # seconds; the next tick is minutes away
# Not the 3 s of the other daemon tests: with 3 s the leader refuses to tick for a moment at
# the end of every loop turn (lease within the 2 s write margin), and a command whose wake-up
# lands there waits for the next tick (see test_leadership, the too-short-lease test).
LEASE_TTL_SECONDS = 5.0


def rolloutctl(url: str, *args: str) -> Any:
    """Run ``rolloutctl ARGS -o json`` against ``url``; its parsed output."""
    done = subprocess.run(
        ["rolloutctl", *args, "-o", "json"],
        env=daemon_env(url, "ctl"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"rolloutctl {' '.join(args)}: {done.stderr}"
    return json.loads(done.stdout)


def applied(db: Db, command: int) -> bool:
    """Whether the leader has applied command ``command``."""
    return bool(db.scalar("SELECT status FROM commands WHERE id = :id", id=command) == "applied")


def command_latency(db: Db, command: int, done: Any) -> float:
    """Wait until ``done()`` holds; seconds from the command's creation to the daemon's handling.

    Both times come from the rows themselves (rolloutctl stamps the command just before it
    commits, the daemon stamps it when the tick that applied it commits).
    """
    wait_until(done, COMMAND_DEADLINE, f"command {command} to take effect", interval=0.02)
    (row,) = db.rows(
        "SELECT status, created_at, handled_at FROM commands WHERE id = :id", id=command
    )
    assert row["status"] == "applied", row
    return float((row["handled_at"] - row["created_at"]).total_seconds())


def test_a_command_takes_effect_in_seconds_although_the_next_tick_is_minutes_away(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """With hourly ticks, each ``rolloutctl promote`` is applied within seconds: NOTIFY woke it."""
    leader = daemons.spawn("a")
    leader.wait_role("leader", WAIT)
    workspaces: dict[int, Workspace] = {}

    def start(name: str, interval: str) -> int:
        workspace = Workspace(tmp_path, name)
        workspace.write_plan(
            [canary(5, "1h", gates=()), PAUSE, FULL], interval=interval, trigger_interval=interval
        )
        with db.session() as session:  # rolloutctl start needs the plan's sets pinned
            plan = load_plan(workspace.plan_path).plan
            pin_and_drill(session, plan, tmp_path / "sets", drill=None)
        started: int = rolloutctl(db.url, "start", str(workspace.plan_path))["id"]
        workspaces[started] = workspace
        return started

    rollout = quiet_rollout(start)
    workspace = workspaces[rollout]
    # The leader ticks a new rollout once when it finds it; after that, not for minutes.
    wait_until(lambda: db.state(rollout) == "running", 10, "the rollout to start")

    latencies = []
    # Promoting the canary step: the woken tick verifies its weight...
    command = rolloutctl(db.url, "promote", str(rollout))["command"]
    latencies.append(command_latency(db, command, lambda: applied(db, command)))
    assert "weight_verified" in db.event_kinds(rollout)
    # ...the next one ends its bake, and the rollout waits at the pause step...
    command = rolloutctl(db.url, "promote", str(rollout))["command"]
    latencies.append(
        command_latency(db, command, lambda: db.state(rollout) == "awaiting_promotion")
    )
    status = rolloutctl(db.url, "status", str(rollout))
    assert (status["state"], status["step_kind"]) == ("awaiting_promotion", "pause")
    # ...and promoting the pause moves on to full.
    command = rolloutctl(db.url, "promote", str(rollout))["command"]
    latencies.append(
        command_latency(db, command, lambda: db.state(rollout) != "awaiting_promotion")
    )

    print(f"\ncommand to effect with 60 s ticks: {', '.join(f'{s:.3f} s' for s in latencies)}")
    assert max(latencies) < COMMAND_DEADLINE
    assert rolloutctl(db.url, "status", str(rollout))["step_kind"] == "full"
    assert workspace.router_weight() == 100


# -- a restart of Postgres under the daemon ------------------------------------------------------


def local_cluster(db: Db) -> tuple[str, str]:
    """The (version, name) of the local cluster serving the test database; the test fails
    when there is none (see ``tests.required``)."""
    if shutil.which("pg_ctlcluster") is None or not Path("/etc/postgresql").is_dir():
        missing(
            "restarting Postgres needs a local cluster managed by pg_ctlcluster",
            "install postgresql (bash .ci/run does)",
        )
    data_directory = db.scalar("SELECT current_setting('data_directory')")
    for version in sorted(os.listdir("/etc/postgresql")):
        for name in sorted(os.listdir(f"/etc/postgresql/{version}")):
            if Path(f"/var/lib/postgresql/{version}/{name}") == Path(data_directory):
                return version, name
    missing(
        f"the test database is not served by a local cluster ({data_directory})",
        "point ROLLOUTD_TEST_PG at the local server",
    )


def pg_ctlcluster(version: str, name: str, action: str) -> None:
    """Start, stop or restart the local cluster."""
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action],
        check=True,
        capture_output=True,
        timeout=120,
    )


def postgres_up(url: str) -> bool:
    """Whether Postgres accepts connections to ``url``."""
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.Error:
        return False
    return True


@pytest.fixture
def cluster(db: Db) -> Iterator[tuple[str, str]]:
    """The local cluster, which is running again after the test whatever happened in it."""
    version, name = local_cluster(db)
    yield version, name
    if not postgres_up(db.url):
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "start"],
            capture_output=True,
            timeout=120,
            check=False,
        )
        wait_until(lambda: postgres_up(db.url), 60, "Postgres to be back up", interval=0.5)


@pytest.mark.slow
@pytest.mark.serial
def test_the_daemon_reconnects_after_postgres_restarts_and_finishes_the_rollout(
    daemons: Daemons, db: Db, tmp_path: Path, cluster: tuple[str, str]
) -> None:
    """A Postgres restart mid-bake costs the daemon nothing: it reconnects and finishes alone."""
    leader: Daemon = daemons.spawn("a")
    leader.wait_role("leader", WAIT)
    workspace, rollout = start_rollout_in(
        db, tmp_path, "restart", [canary(5, "2s"), canary(25, "1s"), PAUSE, FULL]
    )
    wait_until(
        lambda: any(e["kind"] == "weight_verified" for e in db.events(rollout)),
        10,
        "the 5% step to start baking",
    )

    pg_ctlcluster(*cluster, "restart")
    restarted_at = time.monotonic()

    wait_until(lambda: db.state(rollout) == "awaiting_promotion", 30, "the pause step")
    print(f"\nreached the pause step {time.monotonic() - restarted_at:.1f} s after the restart")
    rolloutctl(db.url, "promote", str(rollout))
    wait_until(lambda: db.state(rollout) == "completed", 10, "the rollout to complete")
    assert workspace.router_weight() == 100
    assert leader.alive
    leader.wait_role("leader", WAIT)
    # The restart was noticed (the command listener's connection broke), and survived.
    assert leader.logged("command listener reconnecting")
    kinds = db.event_kinds(rollout)
    assert kinds.count("step_entered") == 4
    assert kinds.count("completed") == 1
