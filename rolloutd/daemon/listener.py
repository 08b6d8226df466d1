"""The command listener: Postgres LISTEN/NOTIFY in a thread of its own, which must not die.

``rolloutctl`` sends a NOTIFY with each command so that the leader acts at once instead of
at the rollout's next tick. A NOTIFY only shortens that wait, so the listener never takes
the daemon down, and nothing takes the listener down either: every error (a restart of
Postgres, a bug in a callback, a driver without ``notifies(timeout=)``) is logged, waited
out with a growing backoff and followed by a fresh connection. Its state is what ``/healthz``
shows under ``listener``. A NOTIFY sent while no connection listened is lost for good, so
after each recovery the daemon is asked to catch up (``on_recovered``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from rolloutd.redact import scrub
from rolloutd.store import notify

log = structlog.get_logger("rolloutd.listener")

FIRST_BACKOFF_SECONDS = 1.0
# Long enough not to hammer a Postgres that is down, short enough that commands are prompt
# again soon after it is back.
MAX_BACKOFF_SECONDS = 15.0
POLL_SECONDS = 1.0  # how often the listener looks at the stop flag while nothing arrives


def backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th error in a row: 1, 2, 4 … up to 15."""
    return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2.0 ** max(0, failures - 1))


@dataclass(frozen=True)
class ListenerState:
    """What ``/healthz`` says about the listener.

    ``alive``: its thread runs; ``listening``: it holds a connection that has run LISTEN;
    ``reconnects``: connections made again after an error; ``last_error``: the newest error's
    first line, secrets scrubbed (None until one happens).
    """

    alive: bool
    listening: bool
    reconnects: int
    last_error: str | None

    def for_health(self) -> dict[str, Any]:
        """The JSON object served under ``listener``."""
        return asdict(self)


class CommandListener:
    """Calls ``on_payload`` with each NOTIFY payload on ``channel`` until ``stopping`` is set."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        *,
        on_payload: Callable[[str], None],
        on_recovered: Callable[[], None],
        stopping: threading.Event,
        application_name: str | None = None,
        backoff: Callable[[int], float] = backoff,
    ) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self.on_payload = on_payload
        self.on_recovered = on_recovered
        self.stopping = stopping
        self.application_name = application_name
        self.backoff = backoff
        self._thread = threading.Thread(target=self._run, name="rolloutd-listen", daemon=True)
        self._lock = threading.Lock()
        self._listening = False
        self._reconnects = 0
        self._last_error: str | None = None

    def start(self) -> None:
        """Listen in the background."""
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the listener to see ``stopping`` and close its connection; whether it did."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def state(self) -> ListenerState:
        """A consistent snapshot of the listener's state."""
        with self._lock:
            return ListenerState(
                alive=self._thread.is_alive(),
                listening=self._listening,
                reconnects=self._reconnects,
                last_error=self._last_error,
            )

    def _run(self) -> None:
        failures = 0
        recovering = False  # an error happened since the last LISTEN: NOTIFYs may be lost
        while not self.stopping.is_set():
            try:
                with self._connect() as conn:
                    notify.listen(conn, self.channel)
                    self._listened(recovered=recovering)
                    if recovering:
                        self.on_recovered()
                        recovering = False
                    while not self.stopping.is_set():
                        for payload in self._receive(conn):
                            self.on_payload(payload)
                        # A whole poll without an error: the next error starts the backoff over.
                        failures = 0
            # A connection lost to a restart of Postgres or a network cut: expected, and cured
            # by connecting again.
            except notify.ListenError as exc:
                failures += 1
                recovering = True
                self._failed(exc, failures, unexpected=False)
            # A bug, or a driver too old for this code: logged with its traceback, and the
            # listener carries on, since a dead listener only shows as commands gone slow.
            except Exception as exc:
                failures += 1
                recovering = True
                self._failed(exc, failures, unexpected=True)
        with self._lock:
            self._listening = False

    def _connect(self) -> notify.Listening:
        return notify.connect(self.conninfo, application_name=self.application_name)

    def _receive(self, conn: notify.Listening) -> Iterator[str]:
        """The payloads of the NOTIFYs that arrive within one poll."""
        return notify.receive(conn, POLL_SECONDS)

    def _listened(self, *, recovered: bool) -> None:
        with self._lock:
            self._listening = True
            self._reconnects += recovered
            reconnects = self._reconnects
        if recovered:
            with _unless_logging_fails():
                log.info("command listener reconnected", reconnects=reconnects)

    def _failed(self, exc: Exception, failures: int, *, unexpected: bool) -> None:
        error = scrub(f"{type(exc).__name__}: {str(exc).strip()}".splitlines()[0])
        delay = self.backoff(failures)
        with self._lock:
            self._listening = False
            self._last_error = error
        with _unless_logging_fails():
            if unexpected:
                log.error(
                    "command listener reconnecting", error=error, retry_in_s=delay, exc_info=exc
                )
            else:
                log.warning("command listener reconnecting", error=error, retry_in_s=delay)
        self.stopping.wait(delay)


def _unless_logging_fails() -> contextlib.suppress:
    # A line that cannot be written (stderr's pipe broken while journald restarts) must not end
    # the listener; /healthz still shows its state.
    return contextlib.suppress(OSError, ValueError)
