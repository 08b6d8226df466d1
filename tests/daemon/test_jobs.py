"""The leader's tick jobs follow the rollouts to drive, and let go of what an ended one used."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rolloutd.core.plan import Plan
from rolloutd.daemon.jobs import WORKERS, TickJobs, _Due
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.routers.base import Router
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


class Forgetting:
    """The harness's drivers, recording which rollouts the daemon let go of."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.forgotten: list[int] = []

    def router(self, rollout_id: int, plan: Plan) -> Router:
        return self.inner.router(rollout_id, plan)  # type: ignore[no-any-return]

    def metrics(self, rollout_id: int, plan: Plan) -> Any:
        return self.inner.metrics(rollout_id, plan)

    def executor(self, rollout_id: int, plan: Plan) -> Any:
        return self.inner.executor(rollout_id, plan)

    def forget(self, rollout_id: int) -> None:
        self.forgotten.append(rollout_id)


def _jobs(store: StoreHandle, h: Harness, metrics: DaemonMetrics | None = None) -> TickJobs:
    """The leader's jobs over the harness's reconciler, leading, with no alert sender."""
    return TickJobs(
        store.sessions,
        h.reconciler,
        metrics,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        instance="test",
        wall=lambda: datetime.now(UTC),
        clock=h.clock,
        stopping=threading.Event(),
        leading=lambda: True,
        retention=timedelta(days=1),
    )


def test_an_ended_rollouts_job_and_drivers_go_once_its_watch_is_over(
    store: StoreHandle,
) -> None:
    h = Harness(store)
    drivers = Forgetting(h.reconciler.drivers)
    h.reconciler.drivers = drivers
    jobs = _jobs(store, h)  # neither metrics nor the sender is used by sync()
    jobs.start()
    try:
        jobs.scheduler.pause()  # sync() alone is under test; the test ticks by hand
        h.tick()
        jobs.sync()
        assert jobs.driving(h.rollout_id)
        h.command("abort", "done")
        while h.tick(seconds=5) != "rolled_back":
            pass
        jobs.sync()
        assert jobs.driving(h.rollout_id)  # its router is still watched
        assert drivers.forgotten == []
        h.clock.advance(seconds=h.reconciler.watch_window(None).total_seconds() + 1)
        jobs.sync()
        assert not jobs.driving(h.rollout_id)
        assert drivers.forgotten == [h.rollout_id]
    finally:
        jobs.shutdown()


def test_a_stop_waits_for_the_batches_in_flight_and_drops_those_not_started(
    store: StoreHandle,
) -> None:
    """An overloaded leader's queue of batches must not hold its stop for minutes (systemd
    kills it after ``TimeoutStopSec``): what has not started is derived again by the next
    leader from the stored facts."""
    h = Harness(store)
    metrics = DaemonMetrics(store.sessions, instance="test", wall=h.clock, leading=lambda: 1)
    jobs = _jobs(store, h, metrics)
    release = threading.Event()
    ran: list[int] = []
    lock = threading.Lock()

    def blocked(ids: list[int]) -> dict[int, Any]:
        with lock:
            ran.extend(ids)
        release.wait(30)
        return {}

    h.reconciler.tick_many = blocked  # type: ignore[method-assign,assignment]
    jobs.start()
    queued = WORKERS + 20
    handed = [  # as the ticker hands them out
        jobs._workers.submit(jobs._run_batch, [i], {i: datetime.now(UTC)}) for i in range(queued)
    ]
    stopped = threading.Thread(target=jobs.shutdown)
    stopped.start()
    deadline = time.monotonic() + 30
    while not all(f.cancelled() for f in handed[WORKERS:]) and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    stopped.join(30)
    assert not stopped.is_alive()
    assert sorted(ran) == list(range(WORKERS))  # the ones in flight finished; no other began


def test_batches_that_reach_nothing_over_the_network_run_one_at_a_time_in_one_thread(
    store: StoreHandle,
) -> None:
    """250 rollouts on local drivers and 250 on network ones, all due: the local ones' three
    batches run one after another in one thread (computing side by side only contends for
    the interpreter lock); the others' batches run side by side in the pool; no batch mixes
    the two."""
    h = Harness(store)
    local, remote = set(range(1, 251)), set(range(1001, 1251))
    h.reconciler.local.update(local)
    lock = threading.Lock()
    running = {"local": 0, "remote": 0}
    most = {"local": 0, "remote": 0}
    threads: dict[str, set[str]] = {"local": set(), "remote": set()}
    ticked: set[int] = set()
    mixed: list[list[int]] = []

    def recording(ids: list[int]) -> dict[int, Any]:
        lane = "local" if ids[0] in local else "remote"
        if any((i in local) != (lane == "local") for i in ids):
            mixed.append(ids)
        with lock:
            running[lane] += 1
            most[lane] = max(most[lane], running[lane])
            threads[lane].add(threading.current_thread().name)
        time.sleep(0.1)
        with lock:
            running[lane] -= 1
            ticked.update(ids)
        return {}

    h.reconciler.tick_many = recording  # type: ignore[method-assign,assignment]
    metrics = DaemonMetrics(store.sessions, instance="test", wall=h.clock, leading=lambda: 1)
    jobs = _jobs(store, h, metrics)
    jobs.start()
    try:
        jobs.lead()
        with jobs._kick:  # as sync() adds the rollouts it reads
            now = datetime.now(UTC)
            for rollout_id in local | remote:
                jobs._rollouts[rollout_id] = _Due(None, now)
            jobs._soonest = now
            jobs._kick.notify()
        deadline = time.monotonic() + 30
        while not (local | remote) <= ticked and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        jobs.shutdown()
    assert (local | remote) <= ticked
    assert mixed == []
    assert most["local"] == 1
    assert len(threads["local"]) == 1 and threads["local"].pop().startswith("tick-local")
    assert most["remote"] > 1
    assert not any(name.startswith("tick-local") for name in threads["remote"])


def test_ticking_from_a_batch_handed_out_until_it_finished(store: StoreHandle) -> None:
    """A scrape gives way while ticks run: from the moment the ticker hands a batch out
    (queued for a thread or running) until it finished."""
    h = Harness(store)
    metrics = DaemonMetrics(store.sessions, instance="test", wall=h.clock, leading=lambda: 1)
    jobs = _jobs(store, h, metrics)
    release = threading.Event()

    def blocked(ids: list[int]) -> dict[int, Any]:
        release.wait(30)
        return {}

    h.reconciler.tick_many = blocked  # type: ignore[method-assign,assignment]
    assert not jobs.ticking()
    now = datetime.now(UTC)
    with jobs._kick:
        jobs._rollouts[h.rollout_id] = _Due(None, now)
        ((ids, dues, _),) = jobs._due_batches(now)
    assert ids == [h.rollout_id] and jobs.ticking()  # handed out, not started
    running = threading.Thread(target=jobs._run_batch, args=(ids, dues))
    running.start()
    assert jobs.ticking()
    release.set()
    running.join(30)
    assert not jobs.ticking()
