"""The command listener: NOTIFY payloads reach the callback, and no error ends the thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import psycopg
import pytest

from rolloutd.daemon.listener import CommandListener, ListenerState, backoff
from tests.daemon.helpers import wait_until

if TYPE_CHECKING:
    from conftest import StoreHandle

CHANNEL = "rolloutd_test_listener"


class Recorder:
    """The listener's callbacks, recording what they were called with."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.recoveries = 0

    def payload(self, payload: str) -> None:
        self.payloads.append(payload)

    def recovered(self) -> None:
        self.recoveries += 1


class Listeners:
    """Starts listeners on :data:`CHANNEL` that retry at once, and stops them all."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.started: list[CommandListener] = []

    def start(
        self,
        conninfo: str,
        recorder: Recorder,
        *,
        application_name: str | None = None,
        delay: Callable[[int], float] = lambda _failures: 0.01,
    ) -> CommandListener:
        """A running listener calling ``recorder``."""
        listener = CommandListener(
            conninfo,
            CHANNEL,
            on_payload=recorder.payload,
            on_recovered=recorder.recovered,
            stopping=self.stopping,
            application_name=application_name,
            backoff=delay,
        )
        listener.start()
        self.started.append(listener)
        return listener

    def stop(self) -> None:
        """Ask every listener to stop, and wait until each thread has ended."""
        self.stopping.set()
        wait_until(
            lambda: not any(listener.state().alive for listener in self.started),
            10,
            "the listeners to stop",
        )


@pytest.fixture
def listeners() -> Iterator[Listeners]:
    """Listeners of the test, stopped before its database goes away."""
    pool = Listeners()
    yield pool
    pool.stop()


def test_backoff_doubles_from_one_second_up_to_fifteen() -> None:
    """Errors in a row wait 1, 2, 4, 8 s, then 15 s for as long as they go on."""
    assert [backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 15, 15, 15]


def test_an_unreachable_database_keeps_the_listener_alive_and_says_why(
    listeners: Listeners,
) -> None:
    """Connections refused again and again: the thread lives on, not listening, with the error
    and without the password; it ends when asked to stop."""
    failures: list[int] = []

    def delay(n: int) -> float:
        failures.append(n)
        return 0.01

    listener = listeners.start(
        "postgresql://ops:hunter2@127.0.0.1:1/rolloutd", Recorder(), delay=delay
    )
    wait_until(lambda: len(failures) >= 3, 10, "three failed connections")

    state = listener.state()
    assert (state.alive, state.listening, state.reconnects) == (True, False, 0)
    assert state.last_error is not None
    assert state.last_error.startswith("OperationalError: ")
    assert "hunter2" not in state.last_error
    assert failures[:3] == [1, 2, 3]  # the backoff grows with the errors in a row

    listeners.stop()
    assert not listener.state().alive


def test_a_log_line_that_cannot_be_written_does_not_end_the_listener(
    listeners: Listeners, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stderr's pipe broken (journald restarting), failures go on being retried."""

    class BrokenLog:
        def __getattr__(self, _level: str) -> Callable[..., None]:
            def write(*_args: object, **_fields: object) -> None:
                raise BrokenPipeError(32, "Broken pipe")

            return write

    monkeypatch.setattr("rolloutd.daemon.listener.log", BrokenLog())
    failures: list[int] = []

    def delay(n: int) -> float:
        failures.append(n)
        return 0.01

    listener = listeners.start("postgresql://127.0.0.1:1/rolloutd", Recorder(), delay=delay)
    wait_until(lambda: len(failures) >= 3, 10, "three failed connections")

    assert listener.state().alive


@pytest.mark.postgres
def test_a_listener_whose_connection_is_killed_reconnects_and_catches_up(
    pg_store: StoreHandle, listeners: Listeners
) -> None:
    """Payloads arrive; after its backend is terminated the listener connects again, counts a
    reconnect, calls ``on_recovered`` once and receives payloads again."""
    recorder = Recorder()
    name = f"listener-test-{uuid.uuid4().hex[:8]}"
    listener = listeners.start(pg_store.url, recorder, application_name=name)
    wait_until(lambda: listener.state().listening, 10, "the listener to listen")

    with psycopg.connect(pg_store.url, autocommit=True) as admin:
        admin.execute(f"NOTIFY {CHANNEL}, '7'")
        wait_until(lambda: recorder.payloads == ["7"], 10, "the first payload")
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (name,),
        ).fetchall()
        assert killed == [(True,)]
        wait_until(lambda: listener.state().reconnects == 1, 10, "the reconnect")
        wait_until(lambda: listener.state().listening, 10, "the listener to listen again")
        admin.execute(f"NOTIFY {CHANNEL}, '8'")
        wait_until(lambda: recorder.payloads == ["7", "8"], 10, "a payload after the reconnect")

    state = listener.state()
    assert state == ListenerState(
        alive=True, listening=True, reconnects=1, last_error=state.last_error
    )
    assert state.last_error is not None and "closed the connection" in state.last_error
    assert recorder.recoveries == 1
