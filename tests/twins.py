"""Test twins shared by the reconciler tests: a clock moved by hand, drivers that hand
out the test's own router and metrics source, a leader ticking one rollout with them, and a
leader in a child process of its own (to be killed)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import yaml
from sqlalchemy import update

from rolloutd.core.plan import Plan
from rolloutd.deploy.base import Executor
from rolloutd.deploy.executors import build_executor
from rolloutd.gates.base import MetricsSource
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.reconcile import Reconciler
from rolloutd.routers.base import MemoryRouter, Router
from rolloutd.store import lease
from rolloutd.store.models import Lease

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


class Clock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Twins:
    """Drivers that hand out the test's own router, metrics and (if given) executor; without
    one, the executor the plan names."""

    def __init__(
        self, router: Router, metrics: MetricsSource, executor: Executor | None = None
    ) -> None:
        self._router = router
        self._metrics = metrics
        self._executor = executor

    def router(self, rollout_id: int, plan: Plan) -> Router:
        return self._router

    def metrics(self, rollout_id: int, plan: Plan) -> MetricsSource:
        return self._metrics

    def executor(self, rollout_id: int, plan: Plan) -> Executor:
        return self._executor if self._executor is not None else build_executor(plan)

    def forget(self, rollout_id: int) -> None:
        """Kept for the test's life."""


class Leader:
    """A reconciler that holds the leader lease (a real row) and ticks one rollout of
    ``plan``, started by alice at ``start`` on a clock that moves only when told to."""

    def __init__(
        self,
        store: StoreHandle,
        plan: Mapping[str, Any],
        *,
        start: datetime = T0,
        router: Router | None = None,
        metrics: MetricsSource | None = None,
    ) -> None:
        self.store = store
        self.clock = Clock(start)
        self.router = router or MemoryRouter()
        self.metrics = metrics or MemoryMetrics()
        self.held = self.acquire("me")
        self.reconciler = self.new_reconciler()
        loaded = parse_plan(yaml.safe_dump(dict(plan)), "plan.yaml")
        with store.sessions.begin() as session:
            self.rollout_id = start_rollout(session, loaded, actor="alice", now=self.clock())

    def acquire(self, holder: str) -> lease.Held:
        """The leader lease for ``holder``, for longer than any test runs its clock."""
        with self.store.sessions.begin() as session:
            held = lease.acquire(
                session, holder=holder, ttl=timedelta(hours=10_000), now=self.clock()
            )
        assert held is not None
        return held

    def new_reconciler(self, router: Router | None = None, instance: str = "test") -> Reconciler:
        """A reconciler as a freshly started daemon has it (nothing in memory), fenced by
        this leader's lease, with this leader's router unless given another."""
        return Reconciler(
            self.store.sessions,
            Twins(router or self.router, self.metrics),
            clock=self.clock,
            lease=lambda: self.held,
            instance=instance,
        )

    def tick(self, **advance: float) -> str:
        """Move the clock, then run one tick; returns the state."""
        if advance:
            self.clock.advance(**advance)
        return self.reconciler.tick(self.rollout_id).state.value


# The middle of a script for a child process that ticks as a freshly started leader would: on
# the database at sys.argv[1] it takes the (expired) leader lease for five minutes and builds
# ``reconciler`` with the plan's own drivers, its rollout clock ``skew`` ahead of the wall
# clock. The script imports os, sys, datetime, timedelta and UTC and sets ``skew`` before it,
# and ticks ``reconciler`` after it.
CHILD_LEADER = """
from rolloutd.drivers import PlanDrivers
from rolloutd.reconcile import Reconciler
from rolloutd.store import lease
from rolloutd.store.db import make_engine, session_factory

sessions = session_factory(make_engine(sys.argv[1]))
wall = lambda: datetime.now(UTC)
with sessions.begin() as session:
    held = lease.acquire(session, holder=f"child-{os.getpid()}", ttl=timedelta(minutes=5),
                         now=wall())
assert held is not None, "the lease is taken"
reconciler = Reconciler(sessions, PlanDrivers(), clock=lambda: wall() + skew, wall=wall,
                        lease=lambda: held, instance=f"child-{os.getpid()}")
"""


def run_child(
    store: StoreHandle, script: str, *argv: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (see :data:`CHILD_LEADER`) in a fresh interpreter on ``store``'s
    database, with ``argv`` after its URL, once the last leader's lease has expired (which
    waiting out its TTL would do)."""
    with store.sessions.begin() as session:
        session.execute(update(Lease).values(expires_at=datetime.now(UTC) - timedelta(1)))
    return subprocess.run(
        [sys.executable, "-c", script, store.url, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
