"""The leader's tick jobs follow the rollouts to drive, and let go of what an ended one used."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rolloutd.core.plan import Plan
from rolloutd.daemon.jobs import TickJobs
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


def test_an_ended_rollouts_job_and_drivers_go_once_its_watch_is_over(
    store: StoreHandle,
) -> None:
    h = Harness(store)
    drivers = Forgetting(h.reconciler.drivers)
    h.reconciler.drivers = drivers
    jobs = TickJobs(
        store.sessions,
        h.reconciler,
        None,  # type: ignore[arg-type]  # neither is used by sync()
        None,  # type: ignore[arg-type]
        instance="test",
        wall=lambda: datetime.now(UTC),
        clock=h.clock,
        stopping=threading.Event(),
        leading=lambda: True,
        retention=timedelta(days=1),
    )
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
