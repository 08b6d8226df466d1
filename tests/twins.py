"""Test twins shared by the reconciler tests: a clock moved by hand and drivers that hand
out the test's own router and metrics source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rolloutd.analysis.base import MetricsSource
from rolloutd.core.plan import Plan
from rolloutd.deploy.base import Executor
from rolloutd.deploy.executors import build_executor
from rolloutd.routers.base import Router

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
