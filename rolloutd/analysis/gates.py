"""Judging one gate: from its spec and a metrics source to an :class:`Evaluation`.

Rules shared by every kind: a measurement error is *inconclusive* with its reason; a
value resting on fewer samples than the gate's minimum is *pending* (it may neither
pass nor fail on so little); only a measured, sufficient, in-bounds value passes.
Canary-vs-stable kinds and the capacity watch live in ``rolloutd.analysis.comparisons``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rolloutd.actions import Verdict
from rolloutd.analysis.base import Evaluation, Judging, MeasurementError, finite
from rolloutd.analysis.comparisons import judge_capacity, judge_compare, judge_latency
from rolloutd.durations import format_duration
from rolloutd.plan import EventsGate, GateSpec, ThresholdGate

Judge = Callable[[GateSpec, Judging], Evaluation]


def evaluate_gate(spec: GateSpec, judging: Judging) -> Evaluation:
    """Judge one gate now; never raises for a metrics problem (that is inconclusive)."""
    judge = _JUDGES.get(spec.kind)
    name, role, now = judging.name, judging.role, judging.now
    if judge is None:
        return Evaluation(
            name,
            role,
            Verdict.INCONCLUSIVE,
            now,
            reason=f"gate kind {spec.kind!r} cannot be evaluated by this rolloutd",
        )
    idle = judging.idle
    if idle is not None and idle in spec.live_pools():
        return Evaluation(
            name,
            role,
            Verdict.PENDING,
            now,
            reason=f"not applicable at {judging.weight}%: {IDLE_REASON[idle]}",
        )
    try:
        return judge(spec, judging)
    except MeasurementError as exc:
        return Evaluation(name, role, Verdict.INCONCLUSIVE, now, query=exc.query, reason=exc.reason)


IDLE_REASON = {
    "canary": "the canary serves no live traffic (weight 0, not mirrored)",
    "stable": "stable serves no live traffic to compare with",
}


def _threshold(spec: GateSpec, judging: Judging) -> Evaluation:
    assert isinstance(spec, ThresholdGate)
    name, role, source, now = judging.name, judging.role, judging.source, judging.now
    measured = source.measure(spec.signal, spec.pool, spec.window, now)
    value = finite(measured, spec.signal, spec.pool)
    bounds = []
    if spec.max is not None:
        bounds.append(f"<= {spec.max:g}")
    if spec.min is not None:
        bounds.append(f">= {spec.min:g}")
    threshold = " and ".join(bounds)
    passed = Evaluation(
        name,
        role,
        Verdict.PASS,
        now,
        value=value,
        threshold=threshold,
        query=measured.query,
        samples=measured.samples,
        evidence={"signal": spec.signal, "pool": spec.pool, "raw": measured.raw},
    )
    if spec.min_samples and (measured.samples or 0) < spec.min_samples:
        # Too little traffic to judge either way: neither pass nor fail on it.
        reason = f"{measured.samples or 0} samples of the {spec.min_samples} needed"
        return replace(passed, verdict=Verdict.PENDING, reason=reason)
    outside = (spec.max is not None and value > spec.max) or (
        spec.min is not None and value < spec.min
    )
    if outside:
        reason = f"{spec.signal} {value:.4g} is outside {threshold}"
        return replace(passed, verdict=Verdict.FAIL, reason=reason)
    return passed


def _events(spec: GateSpec, judging: Judging) -> Evaluation:
    assert isinstance(spec, EventsGate)
    name, role, source, now = judging.name, judging.role, judging.source, judging.now
    measured = source.measure(spec.signal, "canary", spec.window, now)
    count = finite(measured, spec.signal, "canary")
    threshold = f"<= {spec.max_events} events"
    evidence = {"signal": spec.signal, "pool": "canary", "raw": measured.raw}
    if count > spec.max_events:
        # An OOM or crash on a canary replica is never noise: roll back at once.
        return Evaluation(
            name,
            role,
            Verdict.BREACH,
            now,
            value=count,
            threshold=threshold,
            query=measured.query,
            reason=f"{count:g} {spec.signal} on the canary in the last "
            f"{format_duration(spec.window)}",
            evidence=evidence,
        )
    return Evaluation(
        name,
        role,
        Verdict.PASS,
        now,
        value=count,
        threshold=threshold,
        query=measured.query,
        evidence=evidence,
    )


_JUDGES: dict[str, Judge] = {
    "threshold": _threshold,
    "events": _events,
    "compare": judge_compare,
    "latency": judge_latency,
    "capacity": judge_capacity,
}
