"""The daemon in-process while NTP steps the wall clock: ticks go on, bakes count elapsed time.

The host's two clocks are the real ones plus offsets the test moves: a step moves the wall
clock only, time passing moves both. APScheduler 3 reads ``datetime.now`` itself, so the
``host`` fixture points it at the same stepped wall clock: the scheduler sees a step as it
would on a real host. Time passes on the main-loop thread between two turns, because a
real host's clocks never move halfway through a read of both (a test thread moving the two
offsets while the loop reads them would look like a step).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from pydantic import SecretStr
from sqlalchemy import text

from rolloutd.core.progress import Progress
from rolloutd.daemon.sdnotify import Notifier
from rolloutd.daemon.service import Daemon
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.routers.base import MemoryRouter
from rolloutd.settings import Settings
from rolloutd.store import queries
from tests.daemon.helpers import WAIT, assert_within, wait_until
from tests.plans import HOURLY_STEPS, memory_plan
from tests.twins import Twins

if TYPE_CHECKING:
    from conftest import StoreHandle

HOUR = timedelta(hours=1)
# The lease outlives every jump here: what a step does to leadership is another test's concern.
LEASE_TTL_SECONDS = 4 * 3600.0

APSCHEDULER_CLOCK_READERS = (
    "apscheduler.schedulers.base",
    "apscheduler.executors.base",
    "apscheduler.triggers.interval",
)


class Host:
    """Real time plus offsets: :meth:`step` moves the wall clock, :meth:`elapse` both clocks."""

    def __init__(self) -> None:
        self.wall_offset = timedelta(0)
        self.monotonic_offset = 0.0

    def wall(self) -> datetime:
        return datetime.now(UTC) + self.wall_offset

    def monotonic(self) -> float:
        return time.monotonic() + self.monotonic_offset

    def step(self, delta: timedelta) -> None:
        self.wall_offset += delta

    def elapse(self, seconds: float) -> None:
        self.wall_offset += timedelta(seconds=seconds)
        self.monotonic_offset += seconds


class LoopHook(Notifier):
    """A silent notifier through which the test acts on the main-loop thread between two
    turns, or holds the loop there (a hung loop)."""

    def __init__(self) -> None:
        super().__init__("")
        self._calls: queue.Queue[tuple[Callable[[], None], threading.Event]] = queue.Queue()
        self._open = threading.Event()
        self._open.set()
        self.parked = threading.Event()

    def status(self, status: str) -> bool:
        while not self._calls.empty():
            call, done = self._calls.get_nowait()
            call()
            done.set()
        if not self._open.is_set():
            self.parked.set()
            self._open.wait()
            self.parked.clear()
        return super().status(status)

    def between_turns(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the main-loop thread after its turn; return once it ran."""
        done = threading.Event()
        self._calls.put((call, done))
        wait_until(done.is_set, WAIT, "the main loop to take its turn")

    def hang(self) -> None:
        """Hold the main loop after its current turn; return once it is held."""
        self._open.clear()
        wait_until(self.parked.is_set, WAIT, "the main loop to hang")

    def release(self) -> None:
        """Let the main loop go on."""
        self._open.set()


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Host:
    """Stepped clocks, the scheduler's reads of ``datetime.now`` included."""
    stepped = Host()

    class HostDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:
            return stepped.wall().astimezone(tz)

    for module in APSCHEDULER_CLOCK_READERS:
        monkeypatch.setattr(f"{module}.datetime", HostDatetime)
    return stepped


class Running:
    """A leading daemon in a thread on the host's clocks, with one in-memory router."""

    def __init__(self, store: StoreHandle, host: Host) -> None:
        self.store = store
        self.host = host
        self.hook = LoopHook()
        self.router = MemoryRouter()
        metrics = MemoryMetrics()
        metrics.set("oom_events", "canary", 0)
        settings = Settings(database_url=SecretStr(store.url), lease_ttl_seconds=LEASE_TTL_SECONDS)
        self.daemon = Daemon(
            settings,
            drivers=Twins(self.router, metrics),
            wall=host.wall,
            monotonic=host.monotonic,
            loop_seconds=0.1,
            health_port=0,
            notifier=self.hook,
        )
        self.thread = threading.Thread(target=self.daemon.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.daemon.held is not None, WAIT, "the daemon to lead")

    def stop(self) -> None:
        self.hook.release()
        self.daemon.stopping.set()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive()

    def start(self) -> int:
        """Start a rollout: 5% and 25% for an hour each, then everything."""
        plan = memory_plan(
            name="atlas-bake",
            service="atlas",
            gate="",
            interval="200ms",
            trigger_interval="200ms",
            steps=HOURLY_STEPS,
            artefacts={"stable": "a", "canary": "b"},
        )
        loaded = parse_plan(yaml.safe_dump(plan), "plan.yaml")
        with self.store.sessions.begin() as session:
            return start_rollout(session, loaded, actor="alice", now=self.host.wall())

    # -- reading ---------------------------------------------------------------------------

    def progress(self, rollout_id: int) -> Progress:
        with self.store.sessions() as session:
            return Progress.from_storage(queries.get_rollout(session, rollout_id).progress)

    def evaluations(self, rollout_id: int) -> int:
        """How many gate evaluations the rollout's ticks wrote (one or more a tick)."""
        with self.store.engine.connect() as connection:
            count = connection.execute(
                text("SELECT count(*) FROM gate_evaluations WHERE rollout_id = :id"),
                {"id": rollout_id},
            ).scalar()
        return int(count or 0)

    def jumps(self) -> list[str]:
        """The details of the ``clock_jump`` events, oldest first."""
        with self.store.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT detail FROM events WHERE rollout_id IS NULL"
                    " AND kind = 'clock_jump' ORDER BY id"
                )
            )
            return [str(row[0]) for row in rows]

    def baking(self, rollout_id: int, step: int, weight: int) -> bool:
        """Whether ``step``'s bake runs: its ``weight`` is on the router and verified."""
        progress = self.progress(rollout_id)
        return (
            progress.step_index == step
            and progress.bake_mark is not None
            and self.router.read_weight().weight == weight
        )

    def assert_ticks_go_on(self, rollout_id: int, what: str) -> None:
        """Three more ticks of the rollout happen within the usual deadline."""
        before = self.evaluations(rollout_id)
        assert_within(lambda: self.evaluations(rollout_id) >= before + 3, WAIT, what)

    def healthz(self) -> tuple[int, dict[str, Any]]:
        """``GET /healthz``: the status and the body."""
        assert self.daemon._health is not None
        url = f"http://127.0.0.1:{self.daemon._health.port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture
def running(store: StoreHandle, host: Host) -> Iterator[Running]:
    """A leading daemon on the host's clocks, stopped at teardown."""
    daemon = Running(store, host)
    yield daemon
    daemon.stop()


def test_ticks_go_on_and_bakes_count_elapsed_time_across_wall_clock_steps(
    running: Running, host: Host
) -> None:
    """Mid-bake, the wall clock steps back an hour and later forward an hour: the rollout
    keeps being ticked after each step, each bake completes after an hour of elapsed time
    (not an hour late or early), and each step is recorded once as a clock_jump event."""
    rollout_id = running.start()
    wait_until(lambda: running.baking(rollout_id, 0, 5), WAIT, "the 5% bake to start")

    host.step(-HOUR)
    assert_within(lambda: len(running.jumps()) == 1, WAIT, "the step back to be recorded")
    running.assert_ticks_go_on(rollout_id, "ticks after the wall clock stepped back")
    running.hook.between_turns(lambda: host.elapse(HOUR.total_seconds() - 60))
    running.assert_ticks_go_on(rollout_id, "ticks 59 minutes into the bake")
    assert running.progress(rollout_id).step_index == 0, "the bake ended early"
    running.hook.between_turns(lambda: host.elapse(120))
    assert_within(
        lambda: running.baking(rollout_id, 1, 25), WAIT, "the 5% bake to end after an hour"
    )

    host.step(HOUR)
    assert_within(lambda: len(running.jumps()) == 2, WAIT, "the step forward to be recorded")
    running.assert_ticks_go_on(rollout_id, "ticks after the wall clock stepped forward")
    assert running.progress(rollout_id).step_index == 1, "the step forward ended the bake"
    running.hook.between_turns(lambda: host.elapse(HOUR.total_seconds() + 60))
    assert_within(lambda: running.router.read_weight().weight == 100, WAIT, "the 25% bake to end")
    assert running.jumps() == [
        "the wall clock stepped back 3600 s; bakes and deadlines keep counting elapsed time",
        "the wall clock stepped forward 3600 s; bakes and deadlines keep counting elapsed time",
    ]


def test_healthz_measures_the_loop_age_on_the_monotonic_clock(running: Running, host: Host) -> None:
    """With the main loop hung, /healthz stays 200 when the wall clock steps forward an hour,
    and turns 503 after a minute of elapsed time even though the wall clock stepped back."""
    assert_within(lambda: running.healthz()[0] == 200, WAIT, "/healthz to answer 200")
    running.hook.hang()

    host.step(HOUR)
    status, body = running.healthz()
    assert status == 200 and body["loop_age_seconds"] < 5

    host.elapse(60)
    host.step(-2 * HOUR)
    status, body = running.healthz()
    assert status == 503 and 60 <= body["loop_age_seconds"] < 60 + WAIT

    running.hook.release()
    assert_within(lambda: running.healthz()[0] == 200, WAIT, "/healthz to recover")
