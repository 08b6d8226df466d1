"""SimulatorMetrics answers gate signals per pool over windows of a scaled clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from rolloutd.gates.base import MeasurementError
from rolloutd.sim.fleet import Fleet
from rolloutd.sim.metricsfile import snapshot
from rolloutd.sim.source import SimulatorMetrics
from rolloutd.sim.traffic import TrafficGenerator, TrafficReport

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FIVE_MINUTES = timedelta(minutes=5)


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    """The reference fleet (Triton), its canary answering with broken schemas."""
    with Fleet.reference(
        canary_profile="broken-schema", time_scale=0.001, restart_delay_s=30
    ) as started:
        yield started


def drive(fleet: Fleet, replica: str, sessions: int = 20, seed: int = 0) -> TrafficReport:
    """Run ``sessions`` agent sessions straight at one replica, counted on the fleet gateway."""
    generator = TrafficGenerator(
        fleet.replica(replica).url,
        concurrency=10,
        gateway=fleet.gateway,
        time_scale=fleet.time_scale,
        max_sessions=sessions,
        seed=seed,
    )
    return generator.run()


def test_no_traffic_is_a_measurement_error_not_zero(fleet: Fleet) -> None:
    """Before any request every rate and quantile raises MeasurementError with the reason."""
    metrics = fleet.metrics()
    for signal in (
        "queue_timeout_rate",
        "error_rate",
        "e2e_latency_p95",
        "ttft_p95",
        "kv_cache_usage",
        "sequence_tokens_p99",
    ):
        with pytest.raises(MeasurementError, match="no requests on canary in the last 5m"):
            metrics.measure(signal, "canary", FIVE_MINUTES, T0)
    with pytest.raises(MeasurementError, match="no tool calls on canary"):
        metrics.measure("schema_violation_rate", "canary", FIVE_MINUTES, T0)
    for signal in ("escalation_rate", "session_timeout_rate", "session_schema_violation_rate"):
        with pytest.raises(MeasurementError, match="no sessions on stable"):
            metrics.measure(signal, "stable", FIVE_MINUTES, T0)
    with pytest.raises(MeasurementError, match="no sessions in the last 5m"):
        metrics.measure("session_timeouts", "canary", FIVE_MINUTES, T0)
    with pytest.raises(MeasurementError, match="no signal 'bogus'"):
        metrics.measure("bogus", "canary", FIVE_MINUTES, T0)
    oom = metrics.measure("oom_events", "canary", FIVE_MINUTES, T0)
    assert oom.value == 0 and oom.raw == {"replicas": {"gpu-d": 0}}


def test_signals_per_pool_match_what_the_gateway_saw(fleet: Fleet) -> None:
    """Rates, samples and quantiles per pool agree with the traffic generator's report."""
    metrics = fleet.metrics()
    canary = drive(fleet, "gpu-d", seed=1)
    stable = drive(fleet, "gpu-a", seed=2)
    now = T0 + timedelta(minutes=1)
    timeouts = metrics.measure("queue_timeout_rate", "canary", FIVE_MINUTES, now)
    assert timeouts.samples == canary.pools["canary"].requests
    assert timeouts.value == pytest.approx(canary.rate("timeouts"))
    p95 = metrics.measure("e2e_latency_p95", "canary", FIVE_MINUTES, now)
    assert p95.value == pytest.approx(canary.latency_quantile(0.95))
    assert metrics.measure("e2e_latency", "canary", FIVE_MINUTES, now).value == p95.value
    assert metrics.measure("ttft_p95", "canary", FIVE_MINUTES, now).value < p95.value
    violations = metrics.measure("schema_violation_rate", "canary", FIVE_MINUTES, now)
    assert violations.value == 1.0 and violations.samples == canary.pools["canary"].tool_calls
    assert metrics.measure("schema_violation_rate", "stable", FIVE_MINUTES, now).value == 0.0
    escalation = metrics.measure("escalations", "canary", FIVE_MINUTES, now)
    assert escalation.raw["sessions"] == {"canary": 20, "stable": 20}
    assert escalation.value == escalation.raw["escalations"]["canary"] > 0
    rate = metrics.measure("escalation_rate", "stable", FIVE_MINUTES, now)
    assert rate.samples == 20
    assert rate.value == stable.pools["stable"].escalations / 20
    tokens = metrics.measure("sequence_tokens_p99", "stable", FIVE_MINUTES, now)
    assert 6_500 < tokens.value < 7_400
    kv = metrics.measure("kv_cache_usage", "stable", FIVE_MINUTES, now)
    assert 0.0 < kv.value <= 1.0


def test_once_per_session_signals_count_sessions_against_sessions_started(fleet: Fleet) -> None:
    """The session timeout and schema violation signals are the gateway's once-per-session
    counts over sessions, per pool; their event counts carry both pools."""
    metrics = fleet.metrics()
    canary = drive(fleet, "gpu-d", seed=1)
    drive(fleet, "gpu-a", seed=2)
    now = T0 + timedelta(minutes=1)
    tally = canary.pools["canary"]
    rate = metrics.measure("session_schema_violation_rate", "canary", FIVE_MINUTES, now)
    assert rate.samples == 20
    assert rate.value == tally.session_schema_violations / 20 > 0
    assert tally.session_schema_violations <= tally.schema_violations
    violations = metrics.measure("session_schema_violations", "canary", FIVE_MINUTES, now)
    assert violations.raw["sessions"] == {"canary": 20, "stable": 20}
    assert violations.raw["session_schema_violations"]["stable"] == 0
    assert violations.value == tally.session_schema_violations
    timeouts = metrics.measure("session_timeouts", "canary", FIVE_MINUTES, now)
    assert timeouts.value == tally.session_timeouts <= tally.timeouts
    timeout_rate = metrics.measure("session_timeout_rate", "stable", FIVE_MINUTES, now)
    assert timeout_rate.samples == 20
    written = snapshot(metrics, FIVE_MINUTES, now)  # what the file source of another process reads
    assert written["session_schema_violation_rate"]["canary"] == {
        "value": rate.value,
        "samples": 20,
    }
    assert written["session_timeout_rate"]["stable"]["samples"] == 20


def test_windows_follow_the_callers_clock(fleet: Fleet) -> None:
    """A window holds only traffic after the snapshot at its start; later it is empty."""
    metrics = SimulatorMetrics(fleet.replicas(), fleet.gateway)
    drive(fleet, "gpu-d", sessions=5)
    metrics.mark(T0)
    report = drive(fleet, "gpu-d", sessions=10, seed=3)
    ten = metrics.measure("queue_timeout_rate", "canary", FIVE_MINUTES, T0 + timedelta(minutes=10))
    assert ten.samples == report.pools["canary"].requests
    everything = metrics.measure(
        "requests", "canary", timedelta(hours=1), T0 + timedelta(minutes=10)
    )
    assert everything.samples is not None and everything.samples > ten.samples
    with pytest.raises(MeasurementError, match="no requests on canary in the last 5m"):
        metrics.measure("queue_timeout_rate", "canary", FIVE_MINUTES, T0 + timedelta(minutes=20))


def test_oom_events_count_crashes_of_the_pools_replicas(fleet: Fleet) -> None:
    """An OOM on the canary is one oom_event on canary and none on stable."""
    metrics = fleet.metrics()
    metrics.mark(T0)
    fleet.replica("gpu-d").inject_oom()
    now = T0 + timedelta(seconds=30)
    assert metrics.measure("oom_events", "canary", FIVE_MINUTES, now).value == 1
    assert metrics.measure("oom_events", "stable", FIVE_MINUTES, now).value == 0
    later = T0 + timedelta(minutes=30)
    assert metrics.measure("oom_events", "canary", FIVE_MINUTES, later).value == 0


def test_prompt_drift_pushes_sequence_p99_past_max_seq_len(fleet: Fleet) -> None:
    """Prompts drifting 30% longer put prompt+output p99 over 8,192 and cause errors."""
    metrics = fleet.metrics()
    fleet.replica("gpu-d").set_faults(prompt_drift=1.3)
    drive(fleet, "gpu-d", sessions=10)
    now = T0 + timedelta(minutes=1)
    assert metrics.measure("sequence_tokens_p99", "canary", FIVE_MINUTES, now).value > 8_192
    assert metrics.measure("error_rate", "canary", FIVE_MINUTES, now).value > 0


def test_load_per_replica_is_in_simulated_time_whatever_the_callers_clock(fleet: Fleet) -> None:
    """Requests per simulated second per replica, and the mean in flight by Little's law:
    the same traffic on one canary replica and on one of three stable ones reads as a
    canary carrying three times a stable replica's load."""
    metrics = fleet.metrics()
    metrics.mark(T0)
    canary = drive(fleet, "gpu-d", sessions=10, seed=1)
    stable = drive(fleet, "gpu-a", sessions=10, seed=1)
    now = T0 + timedelta(days=3)  # the caller's clock may run at any speed
    rate = {p: metrics.measure("load_requests_per_replica", p, FIVE_MINUTES, now) for p in POOLS}
    assert rate["canary"].samples == canary.pools["canary"].requests
    assert rate["canary"].raw["replicas"] == 1 and rate["stable"].raw["replicas"] == 3
    simulated = rate["canary"].raw["simulated_seconds"]
    assert simulated == pytest.approx(rate["stable"].raw["simulated_seconds"])
    assert rate["canary"].value == pytest.approx(canary.pools["canary"].requests / simulated)
    ratio = rate["canary"].value / rate["stable"].value
    assert ratio == pytest.approx(3 * canary.total("requests") / stable.total("requests"))
    inflight = metrics.measure("load_inflight_per_replica", "canary", FIVE_MINUTES, now)
    busy = sum(canary.pools["canary"].latencies)
    assert inflight.value == pytest.approx(busy / simulated, rel=0.05)
    assert 0 < inflight.value <= 10  # never more than the 10 concurrent agents


POOLS = ("canary", "stable")


def test_cells_give_each_replica_its_latency_histogram_and_load_per_slice(fleet: Fleet) -> None:
    """Per replica and slice: the TTFT histogram of its completed requests (cumulative, the
    count its requests) and its mean requests in flight (at least 1); a slice without a
    snapshot at each end gives none, and a signal that is not a latency is refused."""
    metrics = fleet.metrics()
    metrics.mark(T0)
    drive(fleet, "gpu-a", sessions=10)
    metrics.mark(T0 + FIVE_MINUTES)
    drive(fleet, "gpu-b", sessions=10, seed=1)
    window = 2 * FIVE_MINUTES
    end = T0 + window

    cells = metrics.cells("ttft", "stable", window, end, FIVE_MINUTES)

    assert [(c.replica, c.pool) for c in cells] == [("gpu-a", "stable"), ("gpu-b", "stable")]
    ledger = [r for r in fleet.ledger.between(0, fleet.ledger.position()) if r.outcome == "ok"]
    for cell in cells:
        served = [r for r in ledger if r.replica == cell.replica]
        assert max(n for _, n in cell.buckets) == len(served) > 0
        below_one = sum(1 for r in served if r.ttft_s <= 1.0)
        assert dict(cell.buckets)[1.0] == below_one
        assert cell.load >= 1.0
    assert metrics.cells("ttft", "canary", window, end, FIVE_MINUTES) == []
    assert metrics.cells("ttft", "stable", window, T0, FIVE_MINUTES) == []  # before any mark
    with pytest.raises(MeasurementError, match="no latency 'error_rate' by load"):
        metrics.cells("error_rate", "stable", window, end, FIVE_MINUTES)
