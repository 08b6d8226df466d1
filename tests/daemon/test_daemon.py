"""The daemon in-process: scheduling across rollouts, the health endpoint, and its logs."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
import structlog
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from sqlalchemy import select

from rolloutd.core.plan import Plan
from rolloutd.daemon.service import Daemon
from rolloutd.deploy.base import Executor
from rolloutd.deploy.executors import build_executor
from rolloutd.gates.base import Measurement, MetricsSource, Pool
from rolloutd.logs import configure_logging
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.redact import register_secret
from rolloutd.routers.base import MemoryRouter, Router
from rolloutd.settings import Settings
from rolloutd.store import queries
from rolloutd.store.models import Lease
from tests.plans import memory_plan

if TYPE_CHECKING:
    from conftest import StoreHandle


def _plan(service: str) -> dict[str, object]:
    return memory_plan(
        name=f"{service}-plan",
        service=service,
        gate="",
        interval="200ms",
        trigger_interval="200ms",
        steps=[{"kind": "canary", "weight": 5, "bake": "1h"}, {"kind": "full"}],
    )


class SlowMetrics:
    """A metrics source that takes ``seconds`` to answer, like a Prometheus under load."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        time.sleep(self.seconds)
        return Measurement(0.0, query="slow")


class PerService:
    """Drivers whose metrics source depends on the rollout's service."""

    def __init__(self, sources: dict[str, MetricsSource]) -> None:
        self.sources = sources
        self.routers: dict[int, Router] = {}

    def router(self, rollout_id: int, plan: Plan) -> Router:
        return self.routers.setdefault(rollout_id, MemoryRouter())

    def metrics(self, rollout_id: int, plan: Plan) -> MetricsSource:
        return self.sources[plan.service]

    def executor(self, rollout_id: int, plan: Plan) -> Executor:
        return build_executor(plan)

    def forget(self, rollout_id: int) -> None:
        """Kept for the test's life."""


@pytest.fixture
def running(store: StoreHandle) -> Iterator[tuple[Daemon, PerService]]:
    """A leading daemon in a thread, with fast rollouts of two services (one with slow metrics)."""
    fast = MemoryMetrics()
    fast.set("oom_events", "canary", 0)
    idle = MemoryMetrics()
    idle.set("oom_events", "canary", 0)
    idle.set("queue_timeout_rate", "canary", 0.0, samples=10)
    drivers = PerService({"slow": SlowMetrics(3.0), "fast": fast, "idle": idle})
    settings = Settings(database_url=SecretStr(store.url), lease_ttl_seconds=5)
    daemon = Daemon(settings, drivers=drivers, loop_seconds=0.1, health_port=0)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    yield daemon, drivers
    daemon.stopping.set()
    thread.join(timeout=15)
    assert not thread.is_alive()


def _start(store: StoreHandle, service: str, plan: dict[str, object] | None = None) -> int:
    with store.sessions.begin() as session:
        loaded = parse_plan(yaml.safe_dump(plan or _plan(service)), f"{service}.yaml")
        return start_rollout(session, loaded, actor="alice", now=datetime.now().astimezone())


def _evaluations(store: StoreHandle, rollout_id: int) -> int:
    with store.sessions() as session:
        return len(queries.recent_values(session, rollout_id, "oom", 1000))


def _wait(predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_a_slow_tick_of_one_rollout_does_not_delay_the_others(
    store: StoreHandle, running: tuple[Daemon, PerService]
) -> None:
    """While one rollout's metrics take 3 s, another rollout keeps ticking every 200 ms."""
    daemon, _ = running
    slow = _start(store, "slow")
    fast = _start(store, "fast")
    _wait(lambda: _evaluations(store, slow) >= 1 or _evaluations(store, fast) >= 3, 10)
    before_fast, before_slow = _evaluations(store, fast), _evaluations(store, slow)
    # Five fast ticks complete while the slow rollout finishes at most one 3 s tick.
    _wait(lambda: _evaluations(store, fast) - before_fast >= 5, 10)
    assert _evaluations(store, slow) - before_slow <= 1
    assert daemon.held is not None


def test_health_endpoint_reports_the_role(
    store: StoreHandle, running: tuple[Daemon, PerService]
) -> None:
    """/healthz answers 200 with role 'leader' once the daemon leads; other paths are 404."""
    daemon, _ = running
    _wait(lambda: daemon.held is not None and daemon._health is not None, 10)
    assert daemon._health is not None
    base = f"http://127.0.0.1:{daemon._health.port}"
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
        body = json.load(response)
        assert response.status == 200
    assert body["role"] == "leader" and body["epoch"] >= 1
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{base}/metrics-nope", timeout=5)
    assert missing.value.code == 404


def test_logs_are_json_lines_with_secrets_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Log lines are JSON with bound fields; registered secrets and URL passwords become ***."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging("info", json_lines=True)
    register_secret("s3cr3t-token-value")
    log = structlog.get_logger("test").bind(rollout=7)
    log.error(
        "cannot reach",
        url="postgresql://ops:hunter2@db.internal/rolloutd",
        hook="https://hooks.slack.com/services/s3cr3t-token-value",
    )
    line = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert line["rollout"] == 7 and line["event"] == "cannot reach"
    assert "hunter2" not in stream.getvalue() and "s3cr3t" not in stream.getvalue()
    assert line["url"] == "postgresql://ops:***@db.internal/rolloutd"


def _state(store: StoreHandle, rollout_id: int) -> str:
    with store.sessions() as session:
        return queries.get_rollout(session, rollout_id).state


def test_an_idle_canary_is_extended_then_rolled_back_and_metrics_say_why(
    store: StoreHandle, running: tuple[Daemon, PerService]
) -> None:
    """A canary seeing 10 of the 1000 samples its step needs: the daemon extends the 1 s bake,
    rolls back when the extension runs out (the gate's rule), and /metrics counts one
    extension and one rollback with cause no_data."""
    daemon, _ = running
    plan = _plan("idle")
    plan["gates"] = {
        "oom": {"kind": "events", "signal": "oom_events"},
        "timeouts": {
            "kind": "threshold",
            "signal": "queue_timeout_rate",
            "max": 0.01,
            "on_no_data": "rollback",
        },
    }
    plan["steps"] = [
        {
            "kind": "canary",
            "weight": 5,
            "bake": "1s",
            "gates": ["timeouts"],
            "min_samples": {"timeouts": 1000},
            "max_extension": "1s",
        },
        {"kind": "full"},
    ]
    rollout = _start(store, "idle", plan)
    _wait(lambda: _state(store, rollout) == "rolled_back", 20)
    with store.sessions() as session:
        kinds = [e.kind for e in queries.list_events(session, rollout)]
    assert kinds.index("step_extended") < kinds.index("rollback_started")
    assert "step_completed" not in kinds
    assert daemon._health is not None
    url = f"http://127.0.0.1:{daemon._health.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {
        (s.name, s.labels.get("cause", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("rollout") == str(rollout)
    }
    assert samples[("rolloutd_rollbacks_total", "no_data")] == 1
    assert samples[("rolloutd_rollbacks_total", "gate")] == 0
    assert samples[("rolloutd_step_extensions_total", "")] == 1


def test_the_lease_is_renewed_while_sigterm_waits_for_a_tick_longer_than_the_ttl(
    store: StoreHandle, running: tuple[Daemon, PerService]
) -> None:
    """Stopping waits for the tick in flight (metrics taking 7 s, beyond the 5 s lease) and
    keeps the lease renewed meanwhile, so the tick's evaluation is still written under it."""
    daemon, drivers = running
    measuring = threading.Event()

    class Slower(SlowMetrics):
        def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
            measuring.set()
            return super().measure(signal, pool, window, now)

    drivers.sources["slow"] = Slower(7.0)
    slow = _start(store, "slow")
    assert measuring.wait(10), "the slow rollout never ticked"
    with store.sessions() as session:
        started_under = session.scalar(select(Lease.expires_at))
    assert started_under is not None
    daemon.stopping.set()
    _wait(lambda: datetime.now(UTC) > started_under, 10)  # that lease has run out
    with store.sessions() as session:
        expires = session.scalar(select(Lease.expires_at))
    assert expires is not None and expires > datetime.now(UTC)
    _wait(lambda: _evaluations(store, slow) >= 1, 10)
