"""The leader's daily retention job compacts long-ended rollouts, and only while it leads."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rolloutd.daemon.jobs import COMPACT_FIRST_AFTER, COMPACT_JOB, TickJobs
from rolloutd.store import lease
from tests.store.test_retention import _lived, _rows

if TYPE_CHECKING:
    from conftest import StoreHandle


def _jobs(store: StoreHandle, h: Any, wall: datetime) -> TickJobs:
    return TickJobs(
        store.sessions,
        h.reconciler,
        None,  # type: ignore[arg-type]  # neither is used by sync() or compact()
        None,  # type: ignore[arg-type]
        instance="test",
        wall=lambda: wall,
        clock=h.clock,
        stopping=threading.Event(),
        leading=lambda: True,
        retention=timedelta(days=1),
    )


def test_the_leader_schedules_and_runs_the_retention_job(store: StoreHandle) -> None:
    """The job is scheduled when the leader syncs its jobs, first a few minutes later; run
    once the rollout ended longer ago than the retention, it deletes most of its rows."""
    h = _lived(store)
    before = len(_rows(store, h.rollout_id))
    wall = datetime.now(UTC)
    jobs = _jobs(store, h, wall)
    jobs.start()
    try:
        jobs.sync()
        job = jobs.scheduler.get_job(COMPACT_JOB)
        assert job is not None
        assert job.next_run_time == wall + COMPACT_FIRST_AFTER
        jobs.compact()
        assert len(_rows(store, h.rollout_id)) == before  # ended less than a day ago
        h.clock.advance(days=2)
        jobs.compact()
        assert len(_rows(store, h.rollout_id)) < before / 2
    finally:
        jobs.shutdown()


def test_an_instance_that_lost_the_lease_compacts_nothing(store: StoreHandle) -> None:
    """Deletes are writes: fenced by the lease like every other."""
    h = _lived(store)
    before = len(_rows(store, h.rollout_id))
    h.clock.advance(days=2)
    with store.sessions.begin() as session:
        lease.release(session, h.held, now=h.clock())
    _jobs(store, h, datetime.now(UTC)).compact()
    assert len(_rows(store, h.rollout_id)) == before
