"""The daemon as a process: SIGTERM, SIGHUP, /healthz, and one instance per SQLite file."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .helpers import (
    LOOP_SECONDS,
    PAUSE,
    WAIT,
    Daemons,
    Db,
    canary,
    daemon_env,
    running_daemons,
    start_rollout_in,
    wait_until,
)

if TYPE_CHECKING:
    from conftest import StoreHandle

# Long enough that a standby leading within seconds can only mean the lease was handed over.
HANDOVER_TTL_SECONDS = 30.0
# A standby tries to lead once per 1 s loop turn; the rest is slack for a busy CI host.
HANDOVER_BOUND = 2 * LOOP_SECONDS + 1.0


@pytest.fixture
def pg_daemons(pg_store: StoreHandle, tmp_path: Path) -> Iterator[Daemons]:
    """Daemons on the test database, all killed at teardown."""
    with running_daemons(pg_store.url, tmp_path) as pool:
        yield pool


@pytest.fixture
def sqlite_daemons(sqlite_url: str, tmp_path: Path) -> Iterator[Daemons]:
    """Daemons on the SQLite database, all killed at teardown."""
    with running_daemons(sqlite_url, tmp_path) as pool:
        yield pool


@pytest.mark.postgres
@pytest.mark.slow
def test_sigterm_exits_zero_and_hands_the_lease_over_at_once(
    pg_daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """SIGTERM: the leader exits 0 within 10 s, releasing its lease so the standby leads at once."""
    leader = pg_daemons.spawn("a", ttl=HANDOVER_TTL_SECONDS)
    leader.wait_role("leader", WAIT)
    standby = pg_daemons.spawn("b", ttl=HANDOVER_TTL_SECONDS)
    standby.wait_role("standby", WAIT)
    workspace, rollout = start_rollout_in(
        db, tmp_path, "busy", [canary(5, "3s"), canary(25, "1h"), PAUSE]
    )
    wait_until(lambda: workspace.router_weight() == 5, 10, "the leader to be busy ticking")

    signalled = time.monotonic()
    assert leader.terminate(timeout=10) == 0
    exited = time.monotonic()
    standby.wait_role("leader", HANDOVER_BOUND)
    handover = time.monotonic() - exited

    print(f"\nSIGTERM to exit: {exited - signalled:.2f} s; exit to new leader: {handover:.2f} s")
    kinds = [(e["kind"], e["actor"]) for e in db.events(None)]
    assert ("leader_released", leader.actor) in kinds
    stopping = next(i for i, line in enumerate(leader.log_lines()) if line["event"] == "stopping")
    after = [line["event"] for line in leader.log_lines()[stopping:]]
    assert after[-1] == "stopped"
    assert not [e for e in after if e.startswith("tick ")], after  # the tick in flight finished
    assert "Traceback" not in leader.log_path.read_text()
    # The new leader carries on where the old one stopped.
    wait_until(lambda: workspace.router_weight() == 25, 10, "the new leader to move to 25%")
    entered = [e["actor"] for e in db.events(rollout) if e["kind"] == "step_entered"]
    assert entered == [leader.actor, standby.actor]


@pytest.mark.postgres
def test_healthz_answers_200_with_the_role_instance_and_epoch(pg_daemons: Daemons) -> None:
    """/healthz answers 200 with leader (and its epoch) or standby; other paths are 404."""
    leader, standby = pg_daemons.leader_and_standby()

    leader_answer, standby_answer = leader.health(), standby.health()
    assert leader_answer is not None
    assert standby_answer is not None
    (leader_code, leader_body), (standby_code, standby_body) = leader_answer, standby_answer
    assert leader_code == standby_code == 200
    assert (leader_body["role"], leader_body["instance"]) == ("leader", "a")
    assert isinstance(leader_body["epoch"], int)
    assert leader_body["epoch"] >= 1
    assert (standby_body["role"], standby_body["instance"], standby_body["epoch"]) == (
        "standby",
        "b",
        None,
    )
    assert leader.port is not None
    with pytest.raises(urllib.error.HTTPError) as not_found:
        urllib.request.urlopen(f"http://127.0.0.1:{leader.port}/admin", timeout=5)
    assert not_found.value.code == 404


def test_a_second_daemon_on_the_same_sqlite_file_refuses_to_start(
    sqlite_daemons: Daemons, sqlite_url: str
) -> None:
    """A second ``rolloutd run`` on one SQLite file exits 1 with a clear message, no traceback."""
    first = sqlite_daemons.spawn("a")
    first.wait_role("leader", WAIT)

    second = subprocess.run(
        ["rolloutd", "run", "--health-port", "0"],
        env=daemon_env(sqlite_url, "b"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert second.returncode == 1, second.stderr
    assert "one instance" in second.stderr
    assert "Traceback" not in second.stderr + second.stdout
    assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert first.alive
    first.wait_role("leader", WAIT)


def test_sighup_reloads_the_settings_and_keeps_running(
    sqlite_daemons: Daemons, tmp_path: Path
) -> None:
    """SIGHUP re-reads the env file (a new log level) and the daemon carries on serving."""
    env_file = tmp_path / "rolloutd.env"
    env_file.write_text("ROLLOUTD_LOG_LEVEL=info\n")
    daemon = sqlite_daemons.spawn("a", env_file=str(env_file))
    daemon.wait_role("leader", WAIT)

    env_file.write_text("ROLLOUTD_LOG_LEVEL=debug\n")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(
        lambda: daemon.logged("settings reloaded", log_level="debug"),
        10,
        "the reload",
        interval=0.1,
    )

    assert daemon.alive
    loops_before = daemon.health()
    assert loops_before is not None
    assert loops_before[0] == 200
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: len(daemon.logged("settings reloaded")) == 2, 10, "the second reload")
    assert daemon.alive
    assert daemon.wait_role("leader", WAIT)["loop_age_seconds"] < 2 * LOOP_SECONDS
