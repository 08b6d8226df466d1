"""The NOTIFY listener survives what kills its connection or its loop, and says so in /healthz.

Commands must stay prompt after a Postgres restart (its backend terminated, then refused
connections for a while) and after a bug in the listener loop: each test checks that, after
the listener recovered, a command is applied within seconds although the rollout's next tick is
minutes away. The in-process tests force the errors through the listener's own seams; the
process test kills the real daemon's listening backend as a restart of Postgres does.
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from pydantic import SecretStr
from sqlalchemy import make_url
from structlog.testing import capture_logs

from rolloutd import redact
from rolloutd.daemon.listener import CommandListener
from rolloutd.daemon.service import Daemon
from rolloutd.settings import Settings

from .helpers import (
    FULL,
    PAUSE,
    WAIT,
    Daemons,
    Db,
    application_name,
    assert_within,
    canary,
    quiet_rollout,
    start_rollout_in,
    wait_until,
)
from .test_commands_notify import COMMAND_DEADLINE, LEASE_TTL_SECONDS, applied, rolloutctl

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = pytest.mark.postgres

# In an error text the listener must show as *** (a driver may quote its connection string).
LEAKY_URL = "postgresql://ops:hunter2-listener@db.internal/rolloutd"

# The application_name of the in-process daemon's connections.
IN_PROCESS = application_name("in-process")


@pytest.fixture
def start_daemon(pg_store: StoreHandle, db: Db) -> Iterator[Callable[[], Daemon]]:
    """Starts one in-process daemon (after the test patched what it needs); stops it at the end,
    its connections closed, so that the next test finds only its own daemon's backends."""
    started: list[tuple[Daemon, threading.Thread]] = []

    def start() -> Daemon:
        # Named apart from any other daemon's backends on the test database.
        url = (
            make_url(pg_store.url)
            .update_query_dict({"application_name": IN_PROCESS})
            .render_as_string(hide_password=False)
        )
        settings = Settings(database_url=SecretStr(url), lease_ttl_seconds=LEASE_TTL_SECONDS)
        daemon = Daemon(settings, loop_seconds=0.2, health_port=0)
        thread = threading.Thread(target=daemon.run, name="test-daemon", daemon=True)
        thread.start()
        started.append((daemon, thread))
        return daemon

    yield start
    for daemon, thread in started:
        daemon.stopping.set()
        thread.join(timeout=15)
        assert not thread.is_alive()
    # A closed connection's backend leaves pg_stat_activity a moment after the client let go.
    wait_until(lambda: not backends(db, IN_PROCESS), WAIT, "the daemon's backends to end")


def backends(db: Db, app: str) -> list[dict[str, Any]]:
    """The backends of the daemon named ``app`` on the test database."""
    return db.rows(
        "SELECT pid, query FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = :app",
        app=app,
    )


def health(daemon: Daemon) -> dict[str, Any]:
    """The in-process daemon's /healthz body."""
    assert daemon._health is not None
    url = f"http://127.0.0.1:{daemon._health.port}/healthz"
    with urllib.request.urlopen(url, timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return body


def listener_of(daemon: Daemon) -> dict[str, Any] | None:
    """The ``listener`` object of /healthz, once the daemon serves it."""
    if daemon._health is None:
        return None
    found: dict[str, Any] | None = health(daemon).get("listener")
    return found


def slow_rollout(db: Db, tmp_path: Path) -> int:
    """A running rollout whose next tick is minutes away: only a NOTIFY makes it act sooner."""
    steps = [canary(5, "1h", gates=()), PAUSE, FULL]

    def start(name: str, interval: str) -> int:
        return start_rollout_in(
            db, tmp_path, name, steps, interval=interval, trigger_interval=interval
        )[1]

    rollout = quiet_rollout(start)
    # The leader ticks a new rollout once when it finds it; after that, not for minutes.
    wait_until(lambda: db.state(rollout) == "running", WAIT, "the rollout to start")
    return rollout


def terminate_listener(db: Db, app: str) -> None:
    """End the listening backend of the daemon, as a restart of Postgres would."""
    killed = db.rows(
        "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = :app"
        " AND query LIKE 'LISTEN %'",
        app=app,
    )
    assert killed == [{"done": True}], killed


def test_a_bug_in_the_listener_loop_is_logged_backed_off_and_survived(
    start_daemon: Callable[[], Daemon],
    db: Db,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The listener's first poll raises a RuntimeError: it is logged with its traceback, the
    listener waits 1 s, listens again, /healthz shows the reconnect and the scrubbed error,
    and then a pause is applied within seconds although the next tick is minutes away."""
    monkeypatch.setattr(redact, "_secrets", set())
    receive = CommandListener._receive
    polls = itertools.count()

    def fails_once(self: CommandListener, conn: psycopg.Connection[Any]) -> Iterator[str]:
        if next(polls) == 0:
            raise RuntimeError(f"injected listener bug near {LEAKY_URL}")
        return receive(self, conn)

    monkeypatch.setattr(CommandListener, "_receive", fails_once)

    with capture_logs() as logs:
        daemon = start_daemon()
        wait_until(
            lambda: (listener_of(daemon) or {}).get("reconnects") == 1, WAIT, "the reconnect"
        )
        rollout = slow_rollout(db, tmp_path)
        command = db.command(rollout, "pause", reason="listener test")
        assert_within(lambda: applied(db, command), COMMAND_DEADLINE, "the pause to apply")

    body = health(daemon)
    assert body["role"] == "leader"
    assert body["listener"] == {
        "alive": True,
        "listening": True,
        "reconnects": 1,
        "last_error": "RuntimeError: injected listener bug near "
        "postgresql://ops:***@db.internal/rolloutd",
    }
    assert db.state(rollout) == "paused"
    (failed,) = [e for e in logs if e["event"] == "command listener reconnecting"]
    assert (failed["log_level"], failed["retry_in_s"]) == ("error", 1.0)
    assert isinstance(failed["exc_info"], RuntimeError)  # rendered as a traceback
    assert [e["reconnects"] for e in logs if e["event"] == "command listener reconnected"] == [1]


@pytest.mark.slow
def test_a_command_written_while_postgres_refused_the_listener_applies_when_it_is_back(
    start_daemon: Callable[[], Daemon],
    db: Db,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The listener's backend is killed and its reconnects refused, as in a restart of Postgres:
    /healthz shows it not listening with the refusal, the backoff grows, and a pause written
    meanwhile (its NOTIFY lost) is applied as soon as the listener is back, not at the tick."""
    monkeypatch.setattr(redact, "_secrets", set())
    refusing = threading.Event()
    connect = CommandListener._connect

    def refused_while_down(self: CommandListener) -> psycopg.Connection[Any]:
        if refusing.is_set():
            raise psycopg.OperationalError(f"connection refused (injected) to {LEAKY_URL}")
        return connect(self)

    monkeypatch.setattr(CommandListener, "_connect", refused_while_down)

    with capture_logs() as logs:
        daemon = start_daemon()
        wait_until(lambda: (listener_of(daemon) or {}).get("listening"), WAIT, "the listener")
        rollout = slow_rollout(db, tmp_path)

        refusing.set()
        terminate_listener(db, IN_PROCESS)
        wait_until(
            lambda: "refused" in str((listener_of(daemon) or {}).get("last_error")),
            WAIT,
            "a refused reconnect",
        )
        down = listener_of(daemon)
        command = db.command(rollout, "pause", reason="written while the listener was down")

        def retries() -> list[float]:
            return [e["retry_in_s"] for e in logs if e["event"] == "command listener reconnecting"]

        wait_until(lambda: len(retries()) >= 3, WAIT, "a third failure in a row")
        assert not applied(db, command)  # its NOTIFY went nowhere; the tick is minutes away

        refusing.clear()
        # The listener tries again within the 4 s of its current backoff, then catches up.
        assert_within(lambda: applied(db, command), 4.0 + COMMAND_DEADLINE, "the catch-up")

    assert down == {
        "alive": True,
        "listening": False,
        "reconnects": 0,
        "last_error": "OperationalError: connection refused (injected) to "
        "postgresql://ops:***@db.internal/rolloutd",
    }
    assert retries()[:3] == [1.0, 2.0, 4.0]
    assert (listener_of(daemon) or {}).get("reconnects") == 1
    assert (listener_of(daemon) or {}).get("listening") is True
    assert db.state(rollout) == "paused"


# -- a real daemon process ----------------------------------------------------------------------


def test_a_daemon_whose_listening_backend_dies_reconnects_and_commands_stay_prompt(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """``rolloutd run`` loses its listening backend (as in a restart of Postgres): /healthz
    counts the reconnect and shows the error, and ``rolloutctl pause`` is then applied within
    seconds although the rollout's next tick is minutes away."""
    leader = daemons.spawn("a")
    assert leader.wait_role("leader", WAIT)["listener"] == {
        "alive": True,
        "listening": True,
        "reconnects": 0,
        "last_error": None,
    }
    rollout = slow_rollout(db, tmp_path)

    terminate_listener(db, application_name("a"))

    def reconnected() -> dict[str, Any] | None:
        answer = leader.health()
        return answer[1] if answer and answer[1]["listener"]["reconnects"] == 1 else None

    body = wait_until(reconnected, WAIT, "the listener to reconnect")
    command = rolloutctl(db.url, "pause", str(rollout), "--reason", "after the reconnect")[
        "command"
    ]
    assert_within(lambda: applied(db, command), COMMAND_DEADLINE, "the pause to apply")

    assert body["listener"]["alive"] and body["listener"]["listening"]
    assert "closed the connection" in body["listener"]["last_error"]
    assert db.state(rollout) == "paused"
    assert [line["level"] for line in leader.logged("command listener reconnecting")] == ["warning"]
    assert leader.logged("command listener reconnected", reconnects=1)
