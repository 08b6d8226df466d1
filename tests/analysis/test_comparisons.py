"""Canary-vs-stable judges and the capacity watch, over the in-memory metrics twin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from rolloutd.actions import Verdict
from rolloutd.analysis.base import Judging
from rolloutd.analysis.gates import evaluate_gate
from rolloutd.analysis.sources import MemoryMetrics
from rolloutd.errors import BadInput
from rolloutd.plan import Plan
from rolloutd.planfile import parse_plan

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _plan(gates: dict[str, Any], capacity: bool = True) -> Plan:
    data: dict[str, Any] = {
        "name": "p",
        "service": "s",
        "environment": "staging",
        "pools": {
            "stable": {"replicas": [{"name": "a", "url": "http://127.0.0.1:1"}]},
            "canary": {"replicas": [{"name": "b", "url": "http://127.0.0.1:1"}]},
        },
        "router": {"driver": "memory"},
        "metrics": {"source": "memory"},
        "artefacts": {"stable": "x", "canary": "y"},
        "gates": gates,
        "steps": [
            {"kind": "canary", "weight": 5, "bake": "1h", "gates": list(gates)},
            {"kind": "canary", "weight": 25, "bake": "1h", "gates": list(gates)},
            {"kind": "full"},
            {"kind": "steady", "duration": "1h", "gates": list(gates)},
        ],
    }
    if not capacity:
        # Structure only: a plan file like this is refused, but the judge must cope anyway.
        return Plan.model_validate(data)
    data["capacity"] = {"max_seq_len": 8192, "target_concurrency": 60}
    return parse_plan(yaml.safe_dump(data), "plan.yaml").plan


def _judge(plan: Plan, gate: str, metrics: MemoryMetrics) -> Any:
    judging = Judging(gate, "step", metrics, NOW, plan, NOW - timedelta(hours=1))
    return evaluate_gate(plan.gates[gate], judging)


ESCALATIONS = {"esc": {"kind": "compare", "signal": "escalations", "alpha": 0.05}}


def test_compare_fails_when_the_canary_escalates_far_more_than_its_share() -> None:
    """With 5% of sessions, 40 of 100 escalations on the canary is a clear regression."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 40, samples=500)
    metrics.set("escalations", "stable", 60, samples=9500)
    result = _judge(_plan(ESCALATIONS), "esc", metrics)
    assert result.verdict is Verdict.FAIL
    assert result.statistic is not None and result.statistic > 0
    assert result.evidence["canary"]["events"] == 40
    assert result.evidence["alpha_per_step"] == 0.05 / 3
    assert "Bayes factor" in result.reason


def test_compare_passes_a_canary_no_worse_than_stable() -> None:
    """Escalations in proportion to the canary's share of sessions do not fail the gate."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 5, samples=500)
    metrics.set("escalations", "stable", 95, samples=9500)
    assert _judge(_plan(ESCALATIONS), "esc", metrics).verdict is Verdict.PASS


def test_compare_without_exposure_counts_is_inconclusive() -> None:
    """A signal that carries no session or request counts cannot be compared: inconclusive."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 5)
    metrics.set("escalations", "stable", 95)
    result = _judge(_plan(ESCALATIONS), "esc", metrics)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "exposure" in result.reason


def test_compare_with_a_missing_pool_is_inconclusive() -> None:
    """No stable data means no comparison: inconclusive, never a pass."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 5, samples=500)
    assert _judge(_plan(ESCALATIONS), "esc", metrics).verdict is Verdict.INCONCLUSIVE


def _buckets(median: float, count: int) -> list[list[float]]:
    """A crude latency histogram: 50% under median, 96% under 2x median."""
    return [
        [median / 2, count * 0.1],
        [median, count * 0.5],
        [median * 2, count * 0.96],
        [median * 4, count * 1.0],
        [float("inf"), count],
    ]


LATENCY = {
    "lat": {"kind": "latency", "signal": "e2e_latency", "target_seconds": 12.0, "max_ratio": 1.5}
}


def test_latency_flags_a_canary_far_slower_than_stable_from_buckets() -> None:
    """A canary whose p95 bound sits above 1.5x stable's fails, with the bounds as evidence."""
    metrics = MemoryMetrics()
    metrics.set("e2e_latency", "canary", 16.0, 3000, {"buckets": _buckets(8.0, 3000)})
    metrics.set("e2e_latency", "stable", 4.0, 30000, {"buckets": _buckets(2.0, 30000)})
    result = _judge(_plan(LATENCY), "lat", metrics)
    assert result.verdict is Verdict.FAIL
    assert result.evidence["method"].startswith("time-uniform")


def test_latency_passes_an_identical_canary() -> None:
    """The same histogram shape on both pools, under the target, passes."""
    metrics = MemoryMetrics()
    metrics.set("e2e_latency", "canary", 4.0, 3000, {"buckets": _buckets(2.0, 3000)})
    metrics.set("e2e_latency", "stable", 4.0, 30000, {"buckets": _buckets(2.0, 30000)})
    assert _judge(_plan(LATENCY), "lat", metrics).verdict is Verdict.PASS


def test_latency_without_buckets_uses_the_point_estimate_and_says_so() -> None:
    """A source with only a p95 estimate is compared with the target, and the method is named."""
    metrics = MemoryMetrics()
    gates = {"lat": {"kind": "latency", "signal": "e2e_latency", "target_seconds": 12.0}}
    metrics.set("e2e_latency", "canary", 13.0, 3000)
    result = _judge(_plan(gates), "lat", metrics)
    assert result.verdict is Verdict.FAIL
    assert "point estimate" in result.evidence["method"]


CAPACITY = {"cap": {"kind": "capacity", "kv_usage_max": 0.95}}


def test_capacity_holds_when_prompts_fit_and_fails_when_they_drift_past_max_seq_len() -> None:
    """p99 tokens under max_seq_len pass; drifting past it fails with 'capacity analysis'."""
    metrics = MemoryMetrics()
    metrics.set("sequence_tokens_p99", "canary", 6900, 1000)
    metrics.set("kv_cache_usage", "canary", 0.7, 1000)
    plan = _plan(CAPACITY)
    assert _judge(plan, "cap", metrics).verdict is Verdict.PASS
    metrics.set("sequence_tokens_p99", "canary", 8300, 1000)
    result = _judge(plan, "cap", metrics)
    assert result.verdict is Verdict.FAIL
    assert "capacity analysis is invalid" in result.reason


def test_a_capacity_gate_needs_a_capacity_section_in_the_plan() -> None:
    """Validation refuses a capacity gate when the plan states no capacity assumption."""
    data = yaml.safe_dump(_plan(CAPACITY, capacity=False).model_dump(mode="json"))
    try:
        parse_plan(data, "plan.yaml")
    except BadInput as exc:
        assert [p.field for p in exc.problems] == ["gates.cap"]
    else:
        raise AssertionError("a capacity gate without 'capacity' was accepted")


def test_capacity_without_a_capacity_section_is_inconclusive() -> None:
    """A capacity gate on a plan that states no capacity assumption cannot pass."""
    metrics = MemoryMetrics()
    metrics.set("sequence_tokens_p99", "canary", 6900, 1000)
    metrics.set("kv_cache_usage", "canary", 0.7, 1000)
    result = _judge(_plan(CAPACITY, capacity=False), "cap", metrics)
    assert result.verdict is Verdict.INCONCLUSIVE


def test_nan_and_inf_are_inconclusive_never_a_pass() -> None:
    """A NaN or infinite value from the metrics source makes any gate inconclusive."""
    metrics = MemoryMetrics()
    gates = {"t": {"kind": "threshold", "signal": "error_rate", "max": 0.01}}
    for bad in (float("nan"), float("inf")):
        metrics.set("error_rate", "canary", bad, 1000)
        result = _judge(_plan(gates), "t", metrics)
        assert result.verdict is Verdict.INCONCLUSIVE
        assert "not a finite number" in result.reason
