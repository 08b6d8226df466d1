"""Load-matched judgement around the judges: a pass below the gate's load ratio is pending,
a failure stands, and the load is in the evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
import yaml

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.gates.base import Evaluation, Judging
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.planfile import parse_plan

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GATES: dict[str, Any] = {
    "lat": {"kind": "latency", "signal": "e2e_latency", "target_seconds": 12.0},
    "any_load": {
        "kind": "latency",
        "signal": "e2e_latency",
        "target_seconds": 12.0,
        "min_load_ratio": 0,
    },
    "timeouts": {"kind": "compare", "signal": "queue_timeouts", "min_events": 10},
    "esc": {"kind": "compare", "signal": "escalations", "min_events": 10},
    "p95": {"kind": "threshold", "signal": "e2e_latency_p95", "max": 12.0},
    "errors": {"kind": "threshold", "signal": "error_rate", "max": 0.01},
}


def _plan() -> Plan:
    replicas = [{"name": f"r{i}", "url": "http://127.0.0.1:1"} for i in range(4)]
    data = {
        "name": "p",
        "service": "s",
        "environment": "staging",
        "pools": {"stable": {"replicas": replicas[:3]}, "canary": {"replicas": replicas[3:]}},
        "router": {"driver": "memory"},
        "metrics": {"source": "memory"},
        "artefacts": {"stable": "x", "canary": "y"},
        "gates": GATES,
        "steps": [
            {"kind": "canary", "weight": 5, "bake": "1h"},
            {"kind": "canary", "weight": 25, "bake": "1h", "gates": list(GATES)},
            {"kind": "full"},
        ],
    }
    return parse_plan(yaml.safe_dump(data), "plan.yaml").plan


def _judge(gate: str, metrics: MemoryMetrics, weight: int = 5) -> Evaluation:
    idle: Literal["stable"] | None = "stable" if weight == 100 else None
    judging = Judging(
        gate, "step", metrics, NOW, _plan(), NOW - timedelta(hours=1), weight=weight, idle=idle
    )
    return evaluate_gate(_plan().gates[gate], judging)


def _metrics(canary_load: float = 0.21, stable_load: float = 1.0) -> MemoryMetrics:
    """A fast canary (p95 8 s, no more timeouts than stable) at the given loads."""
    metrics = MemoryMetrics()
    metrics.set("e2e_latency", "canary", 8.0, 500)
    metrics.set("e2e_latency_p95", "canary", 8.0, 500)
    metrics.set("error_rate", "canary", 0.0, 500)
    for signal in ("queue_timeouts", "escalations"):
        metrics.set(signal, "canary", 1, 500)
        metrics.set(signal, "stable", 40, 9500)
    metrics.set_load("canary", canary_load, inflight=canary_load * 8)
    metrics.set_load("stable", stable_load, inflight=stable_load * 8)
    return metrics


def test_a_latency_pass_below_the_load_ratio_is_pending_with_the_ratio_in_evidence() -> None:
    """At a fifth of stable's load per replica, a fast canary proves nothing: pending."""
    result = _judge("lat", _metrics(0.21, 1.0))
    assert result.verdict is Verdict.PENDING
    assert result.reason.startswith("canary underloaded (load ratio 0.21)")
    load = result.evidence["load"]
    assert load["ratio"] == pytest.approx(0.21) and load["basis"] == "requests"
    assert load["canary"] == {"requests_per_s": 0.21, "inflight": pytest.approx(1.68)}
    assert load["planned_ratio"] == pytest.approx((5 / 1) / (95 / 3))
    assert result.value == 8.0  # the measurement itself is kept


def test_a_latency_pass_at_a_matched_load_stands() -> None:
    """At 0.7 of stable's load per replica and more, a pass is a pass."""
    result = _judge("lat", _metrics(0.7, 1.0), weight=25)
    assert result.verdict is Verdict.PASS
    assert result.evidence["load"]["ratio"] == pytest.approx(0.7)


def test_a_latency_failure_at_low_load_still_fails() -> None:
    """Slower than the target even at low load: worse at low load is worse."""
    metrics = _metrics(0.1, 1.0)
    metrics.set("e2e_latency", "canary", 20.0, 500)
    result = _judge("lat", metrics)
    assert result.verdict is Verdict.FAIL
    assert "not under the 12s target" in result.reason
    assert result.evidence["load"]["ratio"] == pytest.approx(0.1)


def test_an_unknown_load_makes_a_pass_pending_and_says_why() -> None:
    """Without load figures, a pass is not trusted: pending, naming what is missing."""
    metrics = _metrics()
    metrics.fail("load_requests_per_replica", "stable", "stable exporter gone")
    metrics.fail("load_inflight_per_replica", "stable", "stable exporter gone")
    result = _judge("lat", metrics)
    assert result.verdict is Verdict.PENDING
    assert result.reason == "load unknown: stable exporter gone"
    load = result.evidence["load"]
    assert load["ratio"] is None and load["unknown"] == "stable exporter gone"
    assert load["stable"]["problems"] == ["stable exporter gone", "stable exporter gone"]


def test_a_stable_pool_without_load_leaves_nothing_to_compare_with() -> None:
    """Zero load on stable is measured, but a ratio to it is not: unknown, pending."""
    result = _judge("lat", _metrics(0.5, 0.0))
    assert result.verdict is Verdict.PENDING
    assert result.reason == "load unknown: stable carries no load to compare with"


def test_in_flight_requests_stand_in_when_the_request_rate_is_unknown() -> None:
    """The request rate is the basis; without it, requests in flight are compared."""
    metrics = _metrics(0.9, 1.0)
    metrics.fail("load_requests_per_replica", "canary", "no rate")
    result = _judge("lat", metrics, weight=25)
    assert result.verdict is Verdict.PASS
    assert result.evidence["load"]["basis"] == "inflight"


@pytest.mark.parametrize(
    ("gate", "ratio"), [("any_load", 0.1), ("p95", 0.2)], ids=["min-load-ratio-0", "threshold"]
)
def test_a_gate_that_does_not_wait_for_load_passes_at_any_load_and_still_records_it(
    gate: str, ratio: float
) -> None:
    """A gate that opts out (min_load_ratio 0) passes at 5%, and an absolute latency bound
    judges as before; the evidence of either still shows the load ratio."""
    result = _judge(gate, _metrics(ratio, 1.0))
    assert result.verdict is Verdict.PASS
    assert result.evidence["load"]["ratio"] == pytest.approx(ratio)


def test_at_100_percent_the_canary_carries_all_the_load() -> None:
    """With no stable traffic there is no ratio, and none is needed: the pass stands."""
    metrics = _metrics()
    metrics.fail("load_requests_per_replica", "stable", "no stable traffic")
    metrics.fail("load_inflight_per_replica", "stable", "no stable traffic")
    assert _judge("lat", metrics, weight=100).verdict is Verdict.PASS


def test_a_queue_timeout_comparison_is_load_matched_and_its_failure_kept() -> None:
    """Fewer timeouts on an underloaded canary are no evidence; more of them are."""
    passed = _judge("timeouts", _metrics(0.2, 1.0))
    assert passed.verdict is Verdict.PENDING
    assert passed.reason.startswith("canary underloaded (load ratio 0.20)")
    metrics = _metrics(0.2, 1.0)
    metrics.set("queue_timeouts", "canary", 40, 500)
    failed = _judge("timeouts", metrics)
    assert failed.verdict is Verdict.FAIL
    assert failed.evidence["load"]["ratio"] == pytest.approx(0.2)


def test_gates_load_does_not_change_are_judged_as_before_without_load_queries() -> None:
    """Escalations and error rates do not depend on the queue: no load asked, none stored."""
    metrics = _metrics(0.2, 1.0)
    metrics.fail("load_requests_per_replica", "canary", "must not be asked")
    for gate in ("esc", "errors"):
        result = _judge(gate, metrics)
        assert result.verdict is Verdict.PASS
        assert "load" not in result.evidence


def test_an_inconclusive_judgement_asks_for_no_load() -> None:
    """A gate that could not be measured stays inconclusive, with no load stored."""
    metrics = _metrics()
    metrics.fail("e2e_latency", "canary", "Prometheus down")
    result = _judge("lat", metrics)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "load" not in result.evidence
