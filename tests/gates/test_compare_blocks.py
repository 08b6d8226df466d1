"""The compare gate over a source that answers any window: pending without exposure, blocks
for the dispersion, clustered or not by signal, and a final look stratified by step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import CompareGate, Plan
from rolloutd.gates.base import Evaluation, FinalWindow, Judging, Measurement, Pool
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.sources import MemoryMetrics
from tests.plans import compare_plan

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
Rates = Callable[[Pool, float], tuple[float, float]]
"""(pool, seconds since T0) -> (events, exposure) per second."""


@dataclass
class RateSource:
    """Counts that are integrals of per-second rates, for any window (no noise at all)."""

    rates: Rates
    asked: int = 0

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """Events and exposure between ``now - window`` and ``now``, by the trapezoid rule."""
        self.asked += 1
        start = (now - window - T0).total_seconds()
        end = (now - T0).total_seconds()
        steps = max(1, round(end - start))
        events = exposure = 0.0
        for i in range(steps):
            e, x = self.rates(pool, start + (i + 0.5) * (end - start) / steps)
            events += e * (end - start) / steps
            exposure += x * (end - start) / steps
        return Measurement(round(events), round(exposure), f"rate:{signal}:{pool}")


_plan = compare_plan


def _judge(
    plan: Plan,
    source: Any,
    now: datetime,
    step: datetime,
    *,
    earlier: tuple[tuple[datetime, datetime], ...] = (),
    final: FinalWindow | None = None,
    role: str = "step",
) -> Evaluation:
    judging = Judging(
        "not_worse",
        role,
        source,
        now,
        plan,
        step,
        25,
        earlier=earlier,
        final=final,  # type: ignore[arg-type]
    )
    return evaluate_gate(plan.gates["not_worse"], judging)


def test_a_window_without_canary_exposure_is_pending_not_an_error() -> None:
    """30 s at 5% may hold no canary session: nothing to compare yet, so pending (which no
    inconclusive limit counts), where it used to be a measurement error."""
    metrics = MemoryMetrics()
    metrics.set("queue_timeouts", "canary", 0, samples=0)
    metrics.set("queue_timeouts", "stable", 3, samples=760)
    plan = _plan(signal="queue_timeouts")
    result = _judge(plan, metrics, T0 + timedelta(seconds=30), T0)
    assert result.verdict is Verdict.PENDING
    assert "no canary exposure" in result.reason
    metrics.set("queue_timeouts", "canary", 1, samples=40)
    metrics.set("queue_timeouts", "stable", 0, samples=0)
    assert "no stable exposure" in _judge(plan, metrics, T0 + timedelta(seconds=30), T0).reason


def test_escalations_are_once_per_session_and_timeouts_cluster_unless_the_plan_says() -> None:
    """The default follows the signal; the gate's ``clustered`` overrides it."""
    assert not CompareGate(kind="compare", signal="escalations").events_cluster()
    assert CompareGate(kind="compare", signal="queue_timeouts").events_cluster()
    assert not CompareGate(
        kind="compare", signal="queue_timeouts", clustered=False
    ).events_cluster()
    assert CompareGate(kind="compare", signal="escalations", clustered=True).events_cluster()


def _steady(pool: Pool, _: float) -> tuple[float, float]:
    # 10 tool calls a second on the canary (a 5% share), 190 on stable; 1% violate.
    return (0.1, 10.0) if pool == "canary" else (1.9, 190.0)


def test_clustered_events_wait_for_enough_blocks_then_judge_with_their_dispersion() -> None:
    """Ten minutes in (two 5 min blocks) the dispersion is unknown: pending. An hour in,
    eight blocks and a dispersion in the evidence; the clean canary passes."""
    plan = _plan(signal="schema_violations", final_look=False)
    source = RateSource(_steady)
    young = _judge(plan, source, T0 + timedelta(minutes=10), T0, role="trigger")
    assert young.verdict is Verdict.PENDING
    assert "cluster" in young.reason
    assert young.evidence["dispersion"]["blocks"] == 2
    asked = source.asked
    grown = _judge(plan, source, T0 + timedelta(hours=1), T0, role="trigger")
    assert grown.verdict is Verdict.PASS, grown.reason
    assert grown.evidence["dispersion"]["blocks"] == 8
    assert grown.evidence["dispersion"]["bound"] >= 1.0
    assert source.asked - asked == 2 * 8  # the whole window and seven cuts, on both pools


def test_a_canary_far_worse_fails_once_the_blocks_allow_it() -> None:
    """Schema violations at five times stable's rate fail an hour in, the evidence divided by the
    dispersion bound."""

    def worse(pool: Pool, _: float) -> tuple[float, float]:
        return (0.5, 10.0) if pool == "canary" else (1.9, 190.0)

    plan = _plan(signal="schema_violations", final_look=False)
    result = _judge(plan, RateSource(worse), T0 + timedelta(hours=1), T0, role="trigger")
    assert result.verdict is Verdict.FAIL
    assert result.evidence["dispersion"]["df"] >= 2


def test_the_final_look_compares_each_step_with_itself() -> None:
    """Both pools time out 1% in the 5% step and 2% in the 25% step (a busier hour): pooled
    over the steps the canary looks worse; stratified by step it is not, and the gate passes."""

    def busier(pool: Pool, at: float) -> tuple[float, float]:
        share = 0.05 if at < 3600 else 0.25
        rate = 0.01 if at < 3600 else 0.02
        requests = 200 * (share if pool == "canary" else 1 - share)
        return rate * requests, requests

    plan = _plan(signal="escalations", clustered=False)
    source = RateSource(busier)
    now = T0 + timedelta(hours=2, minutes=1)
    earlier = ((T0, T0 + timedelta(hours=1)),)
    final = FinalWindow(T0, T0 + timedelta(hours=2))
    result = _judge(plan, source, now, T0 + timedelta(hours=1), earlier=earlier, final=final)
    assert result.verdict is Verdict.PASS, result.reason
    look = result.evidence["final_look"]
    assert look["method"].startswith("Cochran-Mantel-Haenszel")
    assert look["z"] == pytest.approx(0.0, abs=0.05)
    # The canary's rate over both steps is above stable's all the same.
    assert look["canary_rate"] > look["stable_rate"] * 1.15


def test_a_source_that_answers_every_window_alike_is_judged_as_independent_events() -> None:
    """The in-memory twin gives the same counts for every cut: no block structure to see, so
    the gate judges as before (dispersion 1) and its evidence says why."""
    metrics = MemoryMetrics()
    metrics.set("schema_violations", "canary", 40, samples=500)
    metrics.set("schema_violations", "stable", 60, samples=9500)
    plan = _plan(signal="schema_violations", final_look=False)
    result = _judge(plan, metrics, T0 + timedelta(hours=1), T0, role="trigger")
    assert result.verdict is Verdict.FAIL
    assert "judged as independent" in result.evidence["dispersion"]["note"]
