"""Zero is evidence: the compare gate judges a pool with no events, on the real gate path.

A healthy engine has no timeouts and no errors on either pool for hours, so a clean canary
must be able to pass, and a canary failing beside a silent stable must fail at once, with
the dispersion asked of the pool that has the events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.core.stats.stratified import HISTORY, Tally, estimate_dispersion, history_dispersion
from rolloutd.gates.base import Evaluation, FinalWindow, Judging, Measurement, Pool
from rolloutd.gates.evaluate import evaluate_gate
from tests.plans import compare_plan

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
HOURS = 3


@dataclass
class SeededSource:
    """Per-second counts drawn once from a seeded generator: events arrive in clusters of
    ``cluster`` (a session's turns sharing a fate) at ``rate`` per unit of exposure; any
    window is the difference of two cumulative sums, as ``increase()`` reads a counter."""

    exposure: dict[Pool, float]
    rate: dict[Pool, float]
    cluster: int = 1
    seed: int = 1
    _cumulative: dict[Pool, tuple[Any, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        seconds = HOURS * 3600
        for pool in ("canary", "stable"):
            exposure = rng.poisson(self.exposure[pool], seconds)
            clusters = rng.poisson(exposure * self.rate[pool] / self.cluster)
            self._cumulative[pool] = (
                np.concatenate([[0], np.cumsum(clusters * self.cluster)]),
                np.concatenate([[0], np.cumsum(exposure)]),
            )

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """Events and exposure in ``(now - window, now]``."""
        end = round((now - T0).total_seconds())
        start = max(0, end - round(window.total_seconds()))
        events, exposure = self._cumulative[pool]
        return Measurement(
            float(events[end] - events[start]),
            int(exposure[end] - exposure[start]),
            f"seeded:{signal}:{pool}",
        )


def _plan(signal: str, **gate: Any) -> Plan:
    return compare_plan(signal=signal, **gate)


def _judge(
    plan: Plan,
    source: Any,
    now: datetime,
    *,
    role: str = "trigger",
    final: FinalWindow | None = None,
    bake_over: bool = False,
) -> Evaluation:
    judging = Judging(
        "not_worse",
        role,  # type: ignore[arg-type]
        source,
        now,
        plan,
        T0,
        5,
        final=final,
        bake_over=bake_over,
    )
    return evaluate_gate(plan.gates["not_worse"], judging)


def _five_percent(canary_rate: float, stable_rate: float, **kwargs: Any) -> SeededSource:
    # 10 tool calls a second on the canary, 190 on stable.
    return SeededSource(
        {"canary": 10.0, "stable": 190.0}, {"canary": canary_rate, "stable": stable_rate}, **kwargs
    )


def test_a_clean_canary_beside_a_noisy_stable_passes_the_final_look() -> None:
    """No schema violation on the canary against stable's 1% in clusters of three: the final
    look passes it (it was pending for ever when the dispersion needed events on both)."""
    source = _five_percent(0.0, 0.01, cluster=3, seed=2)
    plan = _plan("schema_violations")
    end = T0 + timedelta(hours=2)
    result = _judge(plan, source, end, role="step", final=FinalWindow(T0, end), bake_over=True)
    assert result.verdict is Verdict.PASS, result.reason
    assert result.evidence["canary"]["events"] == 0
    assert result.evidence["stable"]["events"] > 300
    assert result.evidence["dispersion"]["method"] == HISTORY
    assert result.evidence["final_look"]["z"] < -5


def test_a_clean_canary_passes_a_gate_without_a_final_look_on_stables_events() -> None:
    """Without a final look, stable's events alone carry the pass once the blocks bound the
    dispersion: a clean canary is not held for want of canary events."""
    plan = _plan("schema_violations", final_look=False)
    result = _judge(plan, _five_percent(0.0, 0.01, cluster=3, seed=3), T0 + timedelta(hours=1))
    assert result.verdict is Verdict.PASS, result.reason
    assert result.evidence["dispersion"]["bound"] >= 1.0


def test_events_on_the_canary_beside_a_silent_stable_fail_at_the_every_tick_test() -> None:
    """Stable at 0% and the canary at 1% timeouts: the every-tick test fails it, with the
    dispersion read from the canary's own blocks (it never fired before: no ratio fits)."""
    plan = _plan("queue_timeouts", final_look=False)
    source = _five_percent(0.01, 0.0, seed=4)
    result = _judge(plan, source, T0 + timedelta(minutes=40))
    assert result.verdict is Verdict.FAIL, result.reason
    assert result.evidence["stable"]["events"] == 0
    assert result.evidence["dispersion"]["method"] == HISTORY


def test_once_per_session_signals_judge_a_silent_stable_without_estimating_dispersion() -> None:
    """Sessions with a timeout are one trial a session: their dispersion is known, so a few
    canary sessions with timeouts beside none on stable fail within minutes."""
    plan = _plan("session_timeouts")
    source = SeededSource({"canary": 0.2, "stable": 3.8}, {"canary": 0.14, "stable": 0.0}, seed=5)
    result = _judge(plan, source, T0 + timedelta(minutes=5))
    assert result.verdict is Verdict.FAIL, result.reason
    assert result.evidence["dispersion"]["method"] == "known, not estimated"
    assert result.evidence["canary"]["events"] < 20


def test_no_events_on_either_pool_pass_once_the_step_has_baked() -> None:
    """Both pools clean for the whole step: pending while it bakes (nothing could show the
    canary worse yet), a pass that says why once the bake is over."""
    plan = _plan("errors", final_look=False)
    source = _five_percent(0.0, 0.0, seed=6)
    now = T0 + timedelta(hours=1)
    baking = _judge(plan, source, now, role="step")
    assert baking.verdict is Verdict.PENDING
    baked = _judge(plan, source, now, role="step", bake_over=True)
    assert baked.verdict is Verdict.PASS
    assert "0 events over the whole step" in baked.reason
    assert "the canary was not worse" in baked.reason


def test_a_failure_stands_after_the_bake() -> None:
    """The step-end pass is for too few events, never for a canary the test finds worse."""
    plan = _plan("queue_timeouts", final_look=False)
    result = _judge(
        plan, _five_percent(0.05, 0.01, seed=7), T0 + timedelta(hours=1), bake_over=True
    )
    assert result.verdict is Verdict.FAIL


def _blocks(rng: np.random.Generator, cluster: int, canary_rate: float) -> list[Tally]:
    blocks = []
    for _ in range(8):
        canary = rng.poisson(3000 * canary_rate / cluster) * cluster
        stable = rng.poisson(57000 * 0.01 / cluster) * cluster
        blocks.append(Tally(float(canary), 3000.0, float(stable), 57000.0))
    return blocks


def test_a_pools_own_history_estimates_the_dispersion_of_its_clusters() -> None:
    """Averaged over seeded steps, stable's own blocks read ~1 for independent events and ~3
    when events come three at a time; the split is not asked when the canary has none."""
    rng = np.random.default_rng(8)
    single = [history_dispersion([_blocks(rng, 1, 0.0)]).estimate or 0 for _ in range(80)]
    triple = [history_dispersion([_blocks(rng, 3, 0.0)]).estimate or 0 for _ in range(80)]
    assert 0.75 < float(np.mean(single)) < 1.3
    assert 2.3 < float(np.mean(triple)) < 3.7
    clean = estimate_dispersion([_blocks(rng, 3, 0.0)])
    assert clean.method == HISTORY and clean.df > 6
    both = estimate_dispersion([_blocks(rng, 1, 0.01)])
    assert both.method != HISTORY
    assert history_dispersion([[Tally(0, 10, 0, 100)] * 4]).df == 0
