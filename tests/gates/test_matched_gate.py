"""The latency gate with ``match_load``, over the in-memory twin: it passes, fails or waits at
a 5% weight on a one-to-one fleet, where the load floor alone would hold every pass."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.gates.base import Judging
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.planfile import parse_plan
from rolloutd.sim.loadcells import Fleet, step_cells
from tests.plans import memory_plan

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TTFT = {"kind": "latency", "signal": "ttft", "target_seconds": 1.0, "max_ratio": 1.1}


def _plan(**gate: Any) -> Plan:
    data = memory_plan(
        name="p",
        triggers=(),
        steps=[{"kind": "canary", "weight": 5, "bake": "12h", "gates": ["ttft"]}, {"kind": "full"}],
        gates={"ttft": {**TTFT, **gate}},
    )
    return parse_plan(yaml.safe_dump(data), "plan.yaml").plan


def _metrics(slowdown: float, *, seed: int = 1, slices: int = 1440, **fleet: Any) -> MemoryMetrics:
    """A 1:1 fleet at 5% for 12 h: the canary's pooled histogram, both pools' cells, and a
    canary carrying a twentieth of stable's load."""
    shape = Fleet(canaries=1, stables=1, weight=5, **fleet)
    cells = [
        c for s in step_cells(shape, slices, random.Random(seed), slowdown=slowdown) for c in s
    ]
    metrics = MemoryMetrics()
    for pool in ("canary", "stable"):
        mine = [c for c in cells if c.pool == pool]
        metrics.set_cells("ttft", pool, mine)
        pooled: dict[float, float] = {}
        for cell in mine:
            for edge, n in cell.buckets:
                pooled[edge] = pooled.get(edge, 0.0) + n
        total = max(pooled.values())
        metrics.set("ttft", pool, 0.5, samples=int(total), raw={"buckets": sorted(pooled.items())})
    metrics.set_load("canary", 0.05, 0.3)
    metrics.set_load("stable", 1.0, 5.0)
    return metrics


def _judge(plan: Plan, metrics: MemoryMetrics, weight: int = 5) -> Any:
    judging = Judging("ttft", "step", metrics, NOW, plan, NOW - timedelta(hours=12), weight)
    return evaluate_gate(plan.gates["ttft"], judging)


def test_without_matching_an_underloaded_canary_cannot_pass() -> None:
    """The floor: at 5% on 1:1 the canary carries 0.05 of stable's load, so the pass waits."""
    result = _judge(_plan(), _metrics(1.0))
    assert result.verdict is Verdict.PENDING
    assert result.reason.startswith("canary underloaded")


def test_an_as_fast_canary_passes_at_5_percent_and_names_the_load_it_never_carried() -> None:
    """Same build: a pass at matched load, with stable's higher bands named as not judged."""
    result = _judge(_plan(match_load={"slice": "30s"}), _metrics(1.0))
    assert result.verdict is Verdict.PASS, result.reason
    assert result.reason.startswith("no slower than stable at matched load (1-2 in flight")
    assert "the canary never carried that load" in result.reason
    matched = result.evidence["matched_load"]
    assert matched["resolvable"] and matched["bands"]
    assert result.evidence["load"]["ratio"] < 0.1  # the load is still recorded


def test_a_canary_slower_at_matched_load_fails_at_5_percent() -> None:
    """40% slower at the same concurrency, though idle enough to look fast: it fails."""
    result = _judge(_plan(match_load=True), _metrics(1.4))
    assert result.verdict is Verdict.FAIL, result.reason
    assert result.reason.startswith("canary slower than stable at the same load: at ")


def test_too_few_requests_at_matched_load_wait_rather_than_pass() -> None:
    """An hour at 5%: bands shared, but too few canary requests to have seen a regression."""
    result = _judge(_plan(match_load=True), _metrics(1.0, slices=120))
    assert result.verdict is Verdict.PENDING
    assert "too few yet to see a canary" in result.reason or "no load band" in result.reason


def test_a_source_without_cells_is_inconclusive_naming_it() -> None:
    """A source that cannot give per-replica latency by load: no data, never a pass."""
    metrics = _metrics(1.0)
    plan = _plan(match_load=True)

    class NoCells:
        def measure(self, *args: Any) -> Any:
            return metrics.measure(*args)

    judging = Judging("ttft", "step", NoCells(), NOW, plan, NOW - timedelta(hours=12), 5)
    result = evaluate_gate(plan.gates["ttft"], judging)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "match_load needs per-replica latency by load" in result.reason


def test_match_load_without_max_ratio_is_refused_naming_the_gate() -> None:
    """Matching compares with stable: a plan that gives no max_ratio is told to set one."""
    data = memory_plan(
        name="p",
        triggers=(),
        steps=[{"kind": "canary", "weight": 5, "bake": "1h", "gates": ["ttft"]}, {"kind": "full"}],
        gates={
            "ttft": {"kind": "latency", "signal": "ttft", "target_seconds": 1.0, "match_load": True}
        },
    )
    try:
        parse_plan(yaml.safe_dump(data), "plan.yaml")
    except Exception as exc:  # BadInput: the message names the file and the gate
        assert "gates.ttft" in str(exc) and "set max_ratio" in str(exc)
    else:
        raise AssertionError("a match_load gate without max_ratio was accepted")


def test_the_daemons_wrapped_source_passes_the_cells_on() -> None:
    """The tick asks through the query budget and the suite-fed source: both hand the
    question of cells to the source they wrap, which judges as it does alone (the wrappers
    once hid it, and every match_load gate in the daemon was inconclusive)."""
    from rolloutd.evaluation.source import SuiteFedSource
    from rolloutd.metrics.budget import Budgeted

    plan = _plan(match_load={"slice": "30s"})
    alone = _judge(plan, _metrics(1.0))
    wrapped = Budgeted(SuiteFedSource(_metrics(1.0), {}), timedelta(seconds=30))
    judging = Judging("ttft", "step", wrapped, NOW, plan, NOW - timedelta(hours=12), 5)
    through = evaluate_gate(plan.gates["ttft"], judging)
    assert (through.verdict, through.reason) == (alone.verdict, alone.reason)
    assert through.verdict is Verdict.PASS


def test_a_source_without_cells_behind_the_wrappers_is_named() -> None:
    """A source that cannot give cells, wrapped as the daemon wraps it: inconclusive, naming
    the source that cannot, not the wrapper."""
    from rolloutd.evaluation.source import SuiteFedSource
    from rolloutd.metrics.budget import Budgeted

    plan = _plan(match_load={"slice": "30s"})
    wrapped = Budgeted(SuiteFedSource(Pooled(_metrics(1.0)), {}), timedelta(seconds=30))
    judging = Judging("ttft", "step", wrapped, NOW, plan, NOW - timedelta(hours=12), 5)
    result = evaluate_gate(plan.gates["ttft"], judging)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "(Pooled) cannot give" in result.reason, result.reason


class Pooled:
    """A source that answers pooled values only (as the file and simulator sources once did)."""

    def __init__(self, inner: MemoryMetrics) -> None:
        self.inner = inner

    def measure(self, signal: str, pool: Any, window: timedelta, now: datetime) -> Any:
        return self.inner.measure(signal, pool, window, now)
