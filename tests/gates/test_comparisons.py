"""Canary-vs-stable judges and the capacity watch, over the in-memory metrics twin."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.errors import BadInput
from rolloutd.gates.base import FinalWindow, Judging
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.planfile import parse_plan
from tests.plans import memory_plan, plan_of

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _plan(gates: dict[str, Any], capacity: bool = True) -> Plan:
    data = memory_plan(
        name="p",
        service="s",
        triggers=(),
        steps=[
            {"kind": "canary", "weight": 5, "bake": "1h", "gates": list(gates)},
            {"kind": "canary", "weight": 25, "bake": "1h", "gates": list(gates)},
            {"kind": "full"},
            {"kind": "steady", "duration": "1h", "gates": [g for g in gates if g == "cap"]},
        ],
        gates=gates,
    )
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
    # The every-tick test spends 20% of alpha, the final look 80%.
    assert result.evidence["sequential_alpha"] == pytest.approx(0.05 * 0.2)
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
    _matched_load(metrics)
    assert _judge(_plan(LATENCY), "lat", metrics).verdict is Verdict.PASS


def test_latency_evidence_names_the_bucket_edges_around_the_target() -> None:
    """With edges ... 10, 15, 20 s a 14 s target is resolved in 5 s steps: a p95 shift inside
    (10, 15] cannot move the bound, and the evidence (and status) says so."""
    edges = [5.0, 10.0, 15.0, 20.0, float("inf")]
    shares = [0.5, 0.9, 0.97, 0.99, 1.0]
    metrics = MemoryMetrics()
    for pool, count in (("canary", 3000), ("stable", 30000)):
        buckets = [[le, count * share] for le, share in zip(edges, shares, strict=True)]
        metrics.set("e2e_latency", pool, 9.0, count, {"buckets": buckets})
    _matched_load(metrics)
    plan = _plan({"lat": {**LATENCY["lat"], "target_seconds": 14.0}})
    result = _judge(plan, "lat", metrics)
    assert result.evidence["resolution"] == {
        "target_seconds": 14.0,
        "lower_edge": 10.0,
        "upper_edge": 15.0,
        "step_fraction": pytest.approx(5 / 14),
    }


def _matched_load(metrics: MemoryMetrics) -> None:
    """Both pools carry the same load per replica: a latency pass may count."""
    metrics.set_load("canary", 2.0)
    metrics.set_load("stable", 2.0)


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


def _judge_at(plan: Plan, gate: str, metrics: MemoryMetrics, weight: int, mirrored: bool = False):
    """Judge ``gate`` as a trigger at ``weight`` (the idle pool as a plan's step would say)."""
    idle = "canary" if weight == 0 and not mirrored else "stable" if weight == 100 else None
    judging = Judging(gate, "trigger", metrics, NOW, plan, NOW - timedelta(hours=1), weight, idle)
    return evaluate_gate(plan.gates[gate], judging)


def test_a_comparison_does_not_apply_where_one_pool_serves_nothing() -> None:
    """At 100% (no stable traffic) and at an unmirrored 0% (no canary traffic) a
    canary-vs-stable trigger is pending "not applicable" -- neither a pass on no data nor an
    inconclusive that would pause the rollout -- and the source is not even asked."""
    metrics = MemoryMetrics()  # empty: asking it would be inconclusive
    plan = _plan(ESCALATIONS)
    for weight in (100, 0):
        result = _judge_at(plan, "esc", metrics, weight)
        assert result.verdict is Verdict.PENDING, result
        assert result.reason.startswith(f"not applicable at {weight}%")
    assert _judge_at(plan, "esc", metrics, 0, mirrored=True).verdict is Verdict.INCONCLUSIVE
    assert _judge_at(plan, "esc", metrics, 25).verdict is Verdict.INCONCLUSIVE


def test_restart_counts_apply_at_every_weight() -> None:
    """An OOM needs no requests to be seen: the events gate is judged even at 0%."""
    metrics = MemoryMetrics()
    metrics.set("oom_events", "canary", 1)
    plan = _plan({"oom": {"kind": "events", "signal": "oom_events"}})
    assert _judge_at(plan, "oom", metrics, 0).verdict is Verdict.BREACH


def test_latency_at_100_percent_is_judged_against_its_target_alone() -> None:
    """With no stable traffic the ratio is dropped; the absolute target still holds."""
    metrics = MemoryMetrics()
    metrics.set("e2e_latency", "canary", 4.0, 3000, {"buckets": _buckets(2.0, 3000)})
    plan = _plan(LATENCY)
    passed = _judge_at(plan, "lat", metrics, 100)
    assert passed.verdict is Verdict.PASS
    assert passed.threshold == "p95 < 12s"
    metrics.set("e2e_latency", "canary", 30.0, 3000, {"buckets": _buckets(16.0, 3000)})
    failed = _judge_at(plan, "lat", metrics, 100)
    assert failed.verdict is Verdict.FAIL and "slower than the target" in failed.reason


def _judge_final(plan: Plan, metrics: MemoryMetrics, end: datetime | None) -> Any:
    window = FinalWindow(NOW - timedelta(hours=2), end)
    judging = Judging("esc", "step", metrics, NOW, plan, NOW - timedelta(hours=1), 25, final=window)
    return evaluate_gate(plan.gates["esc"], judging)


def test_the_final_look_catches_a_rise_too_small_for_the_every_tick_test() -> None:
    """Escalations 5% -> 6% over 3,000 canary sessions: the mixture cannot reject, the
    one-sided z test at the end of the last bake does (z ~ 2.28), with its evidence."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 180, samples=3000)
    metrics.set("escalations", "stable", 850, samples=17000)
    plan = _plan(ESCALATIONS)
    before = _judge_final(plan, metrics, None)
    assert before.verdict is Verdict.PENDING
    assert "final look" in before.reason and before.evidence["reject"] is False
    after = _judge_final(plan, metrics, NOW - timedelta(minutes=5))
    assert after.verdict is Verdict.FAIL, after.reason
    look = after.evidence["final_look"]
    assert look["reject"] and look["alpha"] == pytest.approx(0.04)
    # pooled 1030/20000; se = sqrt(.0515 * .9485 * (1/3000 + 1/17000)) = .004377
    assert look["z"] == pytest.approx(0.01 / 0.0043768, rel=1e-4)
    assert look["window_seconds"] == 6900.0
    assert "final look over 6900s" in after.reason


def test_the_final_look_passes_a_canary_no_worse_than_stable() -> None:
    """Same rates on both pools: the final look does not reject, the gate passes."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 150, samples=3000)
    metrics.set("escalations", "stable", 850, samples=17000)
    result = _judge_final(_plan(ESCALATIONS), metrics, NOW - timedelta(minutes=5))
    assert result.verdict is Verdict.PASS
    assert result.evidence["final_look"]["reject"] is False


def test_without_the_final_look_the_every_tick_test_gets_all_of_alpha() -> None:
    """``final_look: false`` keeps the pure sequential gate, which may pass mid-bake."""
    gates = {"esc": {**ESCALATIONS["esc"], "final_look": False}}
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 5, samples=500)
    metrics.set("escalations", "stable", 95, samples=9500)
    result = _judge_final(_plan(gates), metrics, None)
    assert result.verdict is Verdict.PASS
    assert result.evidence["sequential_alpha"] == pytest.approx(0.05)
    assert "final_look" not in result.evidence


def test_a_trigger_that_decides_no_step_makes_no_final_look_and_keeps_all_of_alpha() -> None:
    """A trigger judged at every step, in no step's gates, has no horizon: the mixture gets
    all of alpha."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 5, samples=500)
    metrics.set("escalations", "stable", 95, samples=9500)
    plan = plan_of(memory_plan(gate="", triggers=("esc",), gates=dict(ESCALATIONS)))
    result = _judge_at(plan, "esc", metrics, 25)
    assert result.verdict is Verdict.PASS
    assert result.evidence["sequential_alpha"] == pytest.approx(0.05)


def test_a_trigger_that_also_decides_steps_makes_the_final_look() -> None:
    """Judged as a trigger, a gate some step must pass shares alpha with the final look as a
    step gate does, and makes that look at the last step carrying it."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 180, samples=3000)
    metrics.set("escalations", "stable", 850, samples=17000)
    plan = _plan(ESCALATIONS)
    window = FinalWindow(NOW - timedelta(hours=2), NOW - timedelta(minutes=5))
    judging = Judging(
        "esc", "trigger", metrics, NOW, plan, NOW - timedelta(hours=1), 25, final=window
    )
    result = evaluate_gate(plan.gates["esc"], judging)
    assert result.verdict is Verdict.FAIL, result.reason
    assert result.evidence["sequential_alpha"] == pytest.approx(0.05 * 0.2)
    assert result.evidence["final_look"]["alpha"] == pytest.approx(0.04)


def test_the_evidence_of_earlier_steps_carries_into_this_one() -> None:
    """A rise too weak to show in the 25% step alone is caught with the 5% step's events
    (each step judged with its own canary share), and the earlier step is in the evidence."""
    metrics = MemoryMetrics()
    gates = {"esc": {**ESCALATIONS["esc"], "final_look": False}}
    plan = _plan(gates)
    # Each step: 20 of 50 events on the canary at a 25% share (canary rate 2x stable).
    metrics.set("escalations", "canary", 20, samples=250)
    metrics.set("escalations", "stable", 30, samples=750)
    alone = _judge_at(plan, "esc", metrics, 25)
    assert alone.verdict is Verdict.PASS
    earlier = ((NOW - timedelta(hours=3), NOW - timedelta(hours=2)),)
    judging = Judging(
        "esc", "trigger", metrics, NOW, plan, NOW - timedelta(hours=1), 25, earlier=earlier
    )
    both = evaluate_gate(plan.gates["esc"], judging)
    # MemoryMetrics answers every window alike: the earlier step adds the same 20 vs 30.
    assert both.verdict is Verdict.FAIL, both.reason
    (step,) = both.evidence["earlier_steps"]
    assert step["canary_events"] == 20 and step["canary_share"] == 0.25
    assert both.statistic is not None and alone.statistic is not None
    assert both.statistic > alone.statistic


def _lognormal_buckets(scale: float, count: int) -> list[list[float]]:
    """Expected cumulative counts of a lognormal (median 2 s x ``scale``, sigma 0.5) in
    Prometheus native-histogram buckets (0.25 s x 2^(i/8))."""
    bounds = [0.25 * 2 ** (i / 8) for i in range(57)]
    mu = math.log(2.0 * scale)
    cdf = [0.5 * math.erfc(-(math.log(b) - mu) / (0.5 * math.sqrt(2))) for b in bounds]
    return [[b, round(count * p)] for b, p in zip(bounds, cdf, strict=True)] + [
        [float("inf"), count]
    ]


SLOW = {
    "lat": {"kind": "latency", "signal": "e2e_latency", "target_seconds": 5.23, "max_ratio": 1.1}
}


def test_a_slower_tail_fails_on_the_rate_of_requests_over_the_target() -> None:
    """p95 +20% on 3,000 canary requests: the p95 bounds cannot yet say so, the share of
    requests over the target (~4% against ~2% on stable) can, and the evidence shows both."""
    metrics = MemoryMetrics()
    metrics.set("e2e_latency", "canary", 5.5, 3000, {"buckets": _lognormal_buckets(1.2, 3000)})
    metrics.set("e2e_latency", "stable", 4.6, 57000, {"buckets": _lognormal_buckets(1.0, 57000)})
    result = _judge_at(_plan(SLOW), "lat", metrics, 5)
    assert result.verdict is Verdict.FAIL, result.reason
    slow = result.evidence["slow_requests"]
    assert slow["reject"] and slow["alpha"] == 0.025
    # Counted above the first bucket edge at or over the target (5.66 s): ~4.3% vs ~1.9%.
    assert slow["edge_seconds"] == pytest.approx(0.25 * 2**4.5)
    assert 0.035 < slow["canary_share"] < 0.05 and 0.015 < slow["stable_share"] < 0.025
    assert "of canary requests take over" in result.reason
    assert result.evidence["slower_than_target"] is False  # the bounds alone would pass


def test_the_same_tail_on_both_pools_passes_the_slow_request_test() -> None:
    """No regression: the canary's share over the target matches stable's, no rejection."""
    metrics = MemoryMetrics()
    metrics.set("e2e_latency", "canary", 4.6, 3000, {"buckets": _lognormal_buckets(1.0, 3000)})
    metrics.set("e2e_latency", "stable", 4.6, 57000, {"buckets": _lognormal_buckets(1.0, 57000)})
    _matched_load(metrics)
    result = _judge_at(_plan(SLOW), "lat", metrics, 5)
    assert result.verdict is Verdict.PASS
    assert result.evidence["slow_requests"]["reject"] is False
