"""No exposure is no data: a pool that should serve and has served nothing past the gate's
window makes the gate inconclusive, naming the router, and the rollout pauses on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rolloutd.core.actions import Alert, Verdict
from rolloutd.core.plan import Plan
from rolloutd.core.progress import State
from rolloutd.gates.base import Evaluation, Judging, Pool
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.gates.exposure import no_traffic
from rolloutd.metrics.sources import MemoryMetrics
from tests.plans import World, memory_plan, plan_of

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
ROUTER = "does the router apply the weight?"
GATES: dict[str, Any] = {
    "not_worse": {"kind": "compare", "signal": "escalations", "min_events": 10, "window": "5m"},
    "fast": {
        "kind": "latency",
        "signal": "e2e_latency",
        "target_seconds": 12.0,
        "min_samples": 50,
        "window": "5m",
    },
    "errors": {
        "kind": "threshold",
        "signal": "error_rate",
        "max": 0.01,
        "min_samples": 100,
        "window": "5m",
    },
    "stable_errors": {
        "kind": "threshold",
        "signal": "error_rate",
        "pool": "stable",
        "max": 0.01,
        "window": "5m",
    },
}


def _plan(max_inconclusive: int = 3) -> Plan:
    """Canary 5% and 25% (an hour each) judged by every gate above, then full."""
    judged = list(GATES)
    return plan_of(
        memory_plan(
            gate="",
            triggers=(),
            steps=[
                {"kind": "shadow", "duration": "1h", "mirror": True, "gates": ["not_worse"]},
                {"kind": "canary", "weight": 5, "bake": "1h", "gates": judged},
                {"kind": "canary", "weight": 25, "bake": "1h", "gates": judged},
                {"kind": "full"},
            ],
            gates=GATES,
            limits={"max_inconclusive": max_inconclusive, "on_inconclusive": "pause"},
        )
    )


def _judge(
    gate: str,
    metrics: MemoryMetrics,
    *,
    since: timedelta = timedelta(minutes=12),
    weight: int | None = 5,
    idle: Pool | None = None,
) -> Evaluation:
    """``gate`` judged at NOW, the step's weight verified ``since`` ago."""
    plan = _plan()
    judging = Judging(gate, "step", metrics, NOW, plan, NOW - since, weight=weight, idle=idle)
    return evaluate_gate(plan.gates[gate], judging)


def _quiet(pool: Pool = "canary") -> MemoryMetrics:
    """Every signal with traffic on both pools but ``pool``, which served nothing."""
    metrics = MemoryMetrics()
    busy = {"canary": 500, "stable": 9500}
    for side in ("canary", "stable"):
        served = 0 if side == pool else busy[side]
        metrics.set("escalations", side, 0 if side == pool else 25, samples=served)
        metrics.set("error_rate", side, 0.0 if side == pool else 0.001, samples=served)
        metrics.set("e2e_latency", side, 4.0, samples=served)
    return metrics


def test_a_canary_without_traffic_past_the_gate_window_is_inconclusive_naming_the_router() -> None:
    """12 minutes at 5% without one canary session: a compare gate with a 5 min window is
    inconclusive (no data), saying how long and at what weight, and asking about the router."""
    result = _judge("not_worse", _quiet("canary"))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == f"the canary received no traffic for 12m at weight 5%: {ROUTER}"
    assert result.query == "memory:escalations"


def test_a_stable_pool_without_traffic_is_named_with_its_own_share() -> None:
    """Stable at 95% serving nothing reads "the stable pool ... at weight 95%"."""
    result = _judge("not_worse", _quiet("stable"))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == f"the stable pool received no traffic for 12m at weight 95%: {ROUTER}"


@pytest.mark.parametrize("since", [timedelta(seconds=30), timedelta(minutes=5)])
def test_before_the_step_outlasts_the_gate_window_an_empty_pool_is_pending(
    since: timedelta,
) -> None:
    """30 s, or exactly the gate's 5 min window, without a canary session may be chance: pending
    with the reason it always had, which no inconclusive limit counts."""
    result = _judge("not_worse", _quiet("canary"), since=since)
    assert result.verdict is Verdict.PENDING
    seconds = f"{since.total_seconds():.0f}s"
    assert result.reason == f"no canary exposure in the last {seconds} of this step yet: " + (
        "nothing to compare"
    )


def test_an_unknown_weight_is_left_out_of_the_reason() -> None:
    """Judged without the weight in force (``Judging.weight`` None), the reason names none."""
    result = _judge("not_worse", _quiet("canary"), weight=None)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == f"the canary received no traffic for 12m: {ROUTER}"


def test_neither_pool_serving_asks_about_the_traffic_not_the_split() -> None:
    """No sessions on either pool is not the weight's fault: the reason says so."""
    metrics = MemoryMetrics()
    for pool in ("canary", "stable"):
        metrics.set("escalations", pool, 0, samples=0)
    result = _judge("not_worse", metrics)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == (
        "neither pool received traffic for 12m: does any traffic reach the router?"
    )


def test_a_latency_gate_on_a_canary_without_samples_is_inconclusive_not_a_nan() -> None:
    """A latency gate asks the same question, before it reads the value (NaN over no
    requests); before the window it still waits for samples."""
    metrics = _quiet("canary")
    metrics.set("e2e_latency", "canary", float("nan"), samples=0)
    late = _judge("fast", metrics)
    assert (late.verdict, late.reason) == (
        Verdict.INCONCLUSIVE,
        f"the canary received no traffic for 12m at weight 5%: {ROUTER}",
    )
    metrics.set("e2e_latency", "canary", 0.0, samples=0)
    early = _judge("fast", metrics, since=timedelta(minutes=2))
    assert (early.verdict, early.reason) == (Verdict.PENDING, "0 samples of the 50 needed")


def test_a_threshold_gate_names_only_the_window_it_counted() -> None:
    """A threshold counts its own 5 min window, so 12 minutes in it says 5m, not 12m; on
    stable it names stable's share. Before its window it is short of samples, as before."""
    canary = _judge("errors", _quiet("canary"))
    assert (canary.verdict, canary.reason) == (
        Verdict.INCONCLUSIVE,
        f"the canary received no traffic for 5m at weight 5%: {ROUTER}",
    )
    stable = _judge("stable_errors", _quiet("stable"), weight=25)
    assert stable.reason == f"the stable pool received no traffic for 5m at weight 75%: {ROUTER}"
    early = _judge("errors", _quiet("canary"), since=timedelta(minutes=4))
    assert (early.verdict, early.reason) == (Verdict.PENDING, "0 samples of the 100 needed")


def test_a_pool_sent_no_live_requests_is_not_expected_to_serve() -> None:
    """A mirrored 0% canary (not idle, but sent no live requests) waits as before; an idle
    canary keeps its "not applicable"; stable at 100% is never asked for traffic."""
    mirrored = _judge("not_worse", _quiet("canary"), weight=0)
    assert mirrored.verdict is Verdict.PENDING
    assert mirrored.reason.startswith("no canary exposure")
    idle = _judge("not_worse", _quiet("canary"), weight=0, idle="canary")
    assert idle.verdict is Verdict.PENDING
    assert idle.reason.startswith("not applicable at 0%")
    judging = Judging("x", "step", MemoryMetrics(), NOW, _plan(), NOW - timedelta(hours=1), 100)
    assert no_traffic(judging, {"stable": 0}, window=MINUTE) is None


def test_a_source_that_counts_no_exposure_is_judged_as_before() -> None:
    """Without a count (``samples`` None) nothing says the pool was empty: no finding."""
    judging = Judging("x", "step", MemoryMetrics(), NOW, _plan(), NOW - timedelta(hours=1), 5)
    assert no_traffic(judging, {"canary": None, "stable": 100}, window=MINUTE) is None
    assert no_traffic(judging, {"canary": 1, "stable": 100}, window=MINUTE) is None


def test_an_unexposed_canary_pauses_the_rollout_with_the_router_in_the_reason() -> None:
    """Four such evaluations in a row (the limit is 3) pause the rollout at 5%; the pause
    event and its alert carry the gate's reason, so the operator knows to look at the router."""
    plan = _plan(max_inconclusive=3)
    world = World(plan).reach(1)
    reached = len(world.decisions)
    verified = world.progress.step_verified_at
    assert verified is not None and plan.step_weight(1) == 5
    metrics = _quiet("canary")
    world.wait(timedelta(minutes=5))
    for _ in range(4):
        world.wait(MINUTE)
        judging = Judging("not_worse", "step", metrics, world.now, plan, verified, weight=5)
        evaluation = evaluate_gate(plan.gates["not_worse"], judging)
        assert evaluation.verdict is Verdict.INCONCLUSIVE
        world.tick({"not_worse": evaluation.result()})
    assert (world.state, world.progress.paused) == (State.PAUSED, "inconclusive")
    decision = world.decisions[-1]
    cause = (
        "not_worse: more than 3 inconclusive evaluations in a row (newest: the canary received "
        f"no traffic for 9m at weight 5%: {ROUTER})"
    )
    (paused,) = [e for e in decision.events if e.kind == "paused"]
    assert paused.detail == f"paused: {cause}"
    (alert,) = [a for a in decision.actions if isinstance(a, Alert)]
    assert (alert.topic, alert.text) == ("inconclusive_limit", f"Rollout paused: {cause}")
    assert "step_completed" not in [e.kind for d in world.decisions[reached:] for e in d.events]
