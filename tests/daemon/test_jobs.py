"""The leader's tick jobs follow the rollouts to drive, and let go of what an ended one used."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rolloutd.core.plan import Plan
from rolloutd.daemon.jobs import WORKERS, TickJobs
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
