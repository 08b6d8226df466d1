"""A Prometheus that answers in 20 s costs its own rollout verdicts, never another rollout's
ticks: the leader's tick jobs run on real threads against a slow metrics API."""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from sqlalchemy import select

from rolloutd.core.plan import Plan
from rolloutd.daemon.jobs import TickJobs
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.deploy.base import Executor
from rolloutd.deploy.executors import build_executor
from rolloutd.gates.base import MetricsSource
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.metrics.templates import parse_templates
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.reconcile import Reconciler
from rolloutd.routers.base import MemoryRouter, Router
from rolloutd.store import lease
from rolloutd.store.models import GateEvaluation
from tests.daemon.helpers import wait_until
from tests.metrics.test_prometheus import FakePrometheus, one
from tests.plans import memory_plan

if TYPE_CHECKING:
    from conftest import StoreHandle

SLOW_SECONDS = 20.0
SIGNALS = {
    "queue_timeout_rate": {
        "kind": "ratio",
        "query": 'timeouts{p="{pool}"}',
        "samples": 'requests{p="{pool}"}',
    },
    "oom_events": {
        "kind": "events",
        "query": 'ooms{p="{pool}"}',
        "samples": 'requests{p="{pool}"}',
    },
}


class Drivers:
    """Rollout ``slow`` reads the slow Prometheus; every other one, a metrics twin."""

    def __init__(self, slow: int, prometheus: MetricsSource) -> None:
        self.slow = slow
        self.prometheus = prometheus
        self.twin = MemoryMetrics()
        for pool in ("canary", "stable"):
            self.twin.set("queue_timeout_rate", pool, 0.001, samples=5000)
            self.twin.set("oom_events", pool, 0)
        self.routers: dict[int, Router] = {}

    def router(self, rollout_id: int, plan: Plan) -> Router:
        return self.routers.setdefault(rollout_id, MemoryRouter())

    def metrics(self, rollout_id: int, plan: Plan) -> MetricsSource:
        return self.prometheus if rollout_id == self.slow else self.twin

    def executor(self, rollout_id: int, plan: Plan) -> Executor:
        return build_executor(plan)

    def forget(self, rollout_id: int) -> None:
        """Kept for the test's life."""


@pytest.fixture
def slow_prometheus() -> Iterator[FakePrometheus]:
    """A Prometheus API that takes 20 s over every query of the plan's signals."""
    fake = FakePrometheus()
    for name in ("timeouts", "requests", "ooms"):
        fake.answer(name, one("0"), delay=SLOW_SECONDS)
    yield fake
    fake.close()


def _evaluations(store: StoreHandle, rollout_id: int) -> list[Any]:
    with store.sessions() as session:
        query = select(GateEvaluation).where(GateEvaluation.rollout_id == rollout_id)
        return list(session.scalars(query.order_by(GateEvaluation.id)))


def _ticks(store: StoreHandle, rollout_id: int) -> int:
    """How many ticks judged the rollout's triggers (one evaluation each per tick)."""
    return sum(e.role == "trigger" for e in _evaluations(store, rollout_id))


def test_a_slow_prometheus_does_not_delay_another_rollouts_trigger_ticks(
    pg_store: StoreHandle, slow_prometheus: FakePrometheus
) -> None:
    """Against a Prometheus that answers in 20 s, the slow rollout's ticks end within their
    1 s query budget (their gates inconclusive, saying why) instead of piling up, and the
    other rollout's 1 s trigger ticks go on meanwhile."""
    wall = lambda: datetime.now(UTC)  # noqa: E731
    store = pg_store
    with store.sessions.begin() as session:
        held = lease.acquire(session, holder="test", ttl=timedelta(hours=1), now=wall())
        ids = [
            start_rollout(
                session,
                parse_plan(
                    yaml.safe_dump(memory_plan(service=name, interval="1s", trigger_interval="1s")),
                    f"{name}.yaml",
                ),
                actor="alice",
                now=wall(),
            )
            for name in ("slow", "fast")
        ]
    slow, fast = ids
    templates = parse_templates(yaml.safe_dump({"signals": SIGNALS}), "slow.yaml")
    source = PrometheusMetrics(slow_prometheus.url, templates, timeout=timedelta(seconds=30))
    reconciler = Reconciler(
        store.sessions, Drivers(slow, source), clock=wall, lease=lambda: held, instance="test"
    )
    metrics = DaemonMetrics(store.sessions, instance="test", wall=wall, leading=lambda: 1)
    jobs = TickJobs(
        store.sessions,
        reconciler,
        metrics,
        types.SimpleNamespace(run_once=lambda: None),  # type: ignore[arg-type]
        instance="test",
        wall=wall,
        clock=wall,
        stopping=threading.Event(),
        leading=lambda: True,
    )
    jobs.start()
    try:
        jobs.sync()
        jobs.lead()
        # Without the budget, the slow rollout's first tick alone would take 20 s a query.
        wait_until(lambda: _ticks(store, slow) >= 3, SLOW_SECONDS, "three slow ticks")
        wait_until(lambda: _ticks(store, fast) >= 5, SLOW_SECONDS, "five fast ticks")
    finally:
        jobs.stopping.set()
        jobs.shutdown()
    judged = _evaluations(store, slow)
    assert all(e.verdict == "inconclusive" for e in judged)
    reasons = {e.reason for e in judged}
    assert any("query budget of 1s" in r for r in reasons), reasons
    assert any("did not answer within" in r for r in reasons), reasons
    # No query was given longer than the budget to answer.
    asked = [q["timeout"] for q in slow_prometheus.seen if "timeout" in q]
    assert asked and all(t.endswith("ms") or t == "1s" for t in asked), asked
