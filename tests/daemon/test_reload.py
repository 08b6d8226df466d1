"""SIGHUP applies the log level and the lease TTL from the env file, names the settings that
wait for a restart, and keeps the old settings when the file holds a bad value."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rolloutd.store.models import Lease

from .helpers import WAIT, Daemon, Db, daemon_env, wait_until


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Db]:
    """The test's own connection to the daemon's database."""
    database = Db(sqlite_url)
    yield database
    database.close()


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    """The daemon's env file, starting at log level info and a 3 s lease."""
    path = tmp_path / "rolloutd.env"
    path.write_text("ROLLOUTD_LOG_LEVEL=info\nROLLOUTD_LEASE_TTL_SECONDS=3\n")
    return path


@pytest.fixture
def daemon(sqlite_url: str, env_file: Path, tmp_path: Path) -> Iterator[Daemon]:
    """``rolloutd run`` taking its log level and lease TTL from ``env_file`` alone."""
    env = daemon_env(sqlite_url, "a", env_file=str(env_file))
    # The environment wins over the file: leave the TTL to the file, so that SIGHUP can change it.
    del env["ROLLOUTD_LEASE_TTL_SECONDS"]
    process = Daemon("a", env, tmp_path / "rolloutd-a.log")
    try:
        yield process.wait_serving()
    finally:
        process.close()


def lease_left(db: Db) -> float:
    """Seconds until the leader lease expires."""
    with db.session() as session:
        lease = session.get(Lease, "leader")
        assert lease is not None
        return (lease.expires_at - datetime.now(UTC)).total_seconds()


def test_sighup_applies_the_log_level_and_the_lease_ttl_and_names_what_needs_a_restart(
    daemon: Daemon, db: Db, env_file: Path
) -> None:
    """A new log level and a 30 s TTL apply at once (the next renewal takes the TTL); a new
    health port is logged as waiting for a restart, and /healthz stays where it was."""
    body = daemon.wait_role("leader", WAIT)
    assert body["listener"] is None  # SQLite: commands are found by the ticks
    assert lease_left(db) <= 3.0

    env_file.write_text(
        "ROLLOUTD_LOG_LEVEL=DEBUG\nROLLOUTD_LEASE_TTL_SECONDS=30\nROLLOUTD_HEALTH_PORT=1\n"
    )
    daemon.proc.send_signal(signal.SIGHUP)

    wait_until(
        lambda: daemon.logged("settings reloaded", log_level="debug", lease_ttl_seconds=30.0),
        WAIT,
        "the reload",
    )
    wait_until(lambda: lease_left(db) > 20, WAIT, "a renewal with the 30 s TTL")
    (restart,) = daemon.logged("settings changed that take effect at the next restart")
    assert restart["settings"] == ["ROLLOUTD_HEALTH_PORT"]
    assert restart["level"] == "warning"
    assert daemon.wait_role("leader", WAIT)  # still on the port it started with


def test_sighup_with_a_bad_value_keeps_the_old_settings_and_says_which_variable(
    daemon: Daemon, db: Db, env_file: Path
) -> None:
    """ROLLOUTD_LOG_LEVEL=loud at SIGHUP: an error naming the variable and the value, the
    TTL in the same file not applied, and the daemon leading on as before."""
    daemon.wait_role("leader", WAIT)
    env_file.write_text("ROLLOUTD_LOG_LEVEL=loud\nROLLOUTD_LEASE_TTL_SECONDS=30\n")
    daemon.proc.send_signal(signal.SIGHUP)

    (failed,) = wait_until(
        lambda: daemon.logged("settings reload failed; keeping the old settings"),
        WAIT,
        "the failed reload",
    )
    assert f"{env_file}: ROLLOUTD_LOG_LEVEL:" in failed["error"]
    assert "got 'loud'" in failed["error"]
    assert daemon.alive
    assert daemon.wait_role("leader", WAIT)["loop_age_seconds"] < 2.0
    assert not daemon.logged("settings reloaded")
    assert lease_left(db) <= 3.0
