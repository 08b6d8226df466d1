"""Judging one gate: from its spec and a metrics source to an :class:`Evaluation`.

Rules shared by every kind: a measurement error is *inconclusive* with its reason; a
value resting on fewer samples than the gate's minimum is *pending* (it may neither
pass nor fail on so little), but a pool that should serve and has served nothing once the
step outlasts the gate's window is no data, *inconclusive* (``rolloutd.gates.exposure``);
only a measured, sufficient, in-bounds value passes.
Canary-vs-stable kinds and the capacity watch live in ``rolloutd.gates.comparisons``.

Load-matched judgement wraps them all: a gate on latency or queue timeouts stores both
pools' load per replica with its evaluation, and below its ``min_load_ratio`` (or with
the load unknown) its pass becomes *pending*; a failure stands, since a canary worse at
low load will not be better at high load.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from rolloutd.core.actions import Verdict
from rolloutd.core.counts import counted, events_counted
from rolloutd.core.durations import format_duration
from rolloutd.core.plan import (
    QUEUE_TIMEOUT_SIGNALS,
    CompareGate,
    EventsGate,
    GateSpec,
    LatencyGate,
    ThresholdGate,
    planned_load_ratio,
)
from rolloutd.gates.base import Evaluation, Judging, MeasurementError, finite
from rolloutd.gates.comparisons import judge_capacity, judge_compare, judge_latency
from rolloutd.gates.exposure import no_traffic
from rolloutd.gates.load import measure_load

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
        evaluation = judge(spec, judging)
    except MeasurementError as exc:
        return Evaluation(name, role, Verdict.INCONCLUSIVE, now, query=exc.query, reason=exc.reason)
    return load_matched(spec, judging, evaluation)


def load_matched(spec: GateSpec, judging: Judging, evaluation: Evaluation) -> Evaluation:
    """``evaluation`` with both pools' load in its evidence, for the gates whose verdict load
    changes; a pass below the gate's ``min_load_ratio``, or at an unknown load, is pending."""
    floor = load_floor(spec)
    if floor is None or evaluation.verdict is Verdict.INCONCLUSIVE:
        return evaluation
    load = measure_load(
        judging.source,
        _judged_window(spec, judging),
        judging.now,
        planned_ratio=_planned_ratio(judging),
    )
    evaluation = replace(evaluation, evidence={**evaluation.evidence, "load": load.as_evidence()})
    # A failure stands at any load (worse at low load is worse); at 100% the canary carries
    # everything, which is the load it is judged for.
    if evaluation.verdict is not Verdict.PASS or not floor or judging.idle == "stable":
        return evaluation
    if load.ratio is None:
        return replace(evaluation, verdict=Verdict.PENDING, reason=f"load unknown: {load.unknown}")
    if load.ratio < floor:
        reason = (
            f"canary underloaded (load ratio {load.ratio:.2f}): a pass needs {floor:g} of "
            "stable's load per replica"
        )
        return replace(evaluation, verdict=Verdict.PENDING, reason=reason)
    return evaluation


_LATENCY_SIGNAL = re.compile(r"^(e2e_latency|ttft|queue_time)(_mean|_p\d{1,2}(\.\d+)?)?$")


def load_floor(spec: GateSpec) -> float | None:
    """The load ratio below which ``spec`` may not pass (0: none, load only recorded), or
    None for a gate whose verdict load does not change."""
    if isinstance(spec, LatencyGate):
        return spec.load_floor()
    if isinstance(spec, CompareGate):
        floor = spec.load_floor()
        return floor if floor or spec.signal in QUEUE_TIMEOUT_SIGNALS else None
    if isinstance(spec, ThresholdGate) and _LATENCY_SIGNAL.match(spec.signal):
        # An absolute latency bound judges as it always did; the load is its context.
        return 0.0
    return None


def _judged_window(spec: GateSpec, judging: Judging) -> timedelta:
    """The window the judge looked at: since the step's weight was verified for the
    cumulative kinds, the gate's own window otherwise."""
    if isinstance(spec, LatencyGate | CompareGate):
        return judging.since_step_start(spec.window)
    return spec.window


def _planned_ratio(judging: Judging) -> float | None:
    weight = judging.weight
    if weight is None or not 0 < weight < 100:
        return None
    pools = judging.plan.pools
    return planned_load_ratio(weight, len(pools.canary.replicas), len(pools.stable.replicas))


IDLE_REASON = {
    "canary": "the canary serves no live traffic (weight 0, not mirrored)",
    "stable": "stable serves no live traffic to compare with",
}


def _threshold(spec: GateSpec, judging: Judging) -> Evaluation:
    assert isinstance(spec, ThresholdGate)
    name, role, source, now = judging.name, judging.role, judging.source, judging.now
    measured = source.measure(spec.signal, spec.pool, spec.window, now)
    # Before the value: a rate over no traffic is no data (0/0), not a value to judge. The
    # gate counts its own window only, so that is the time the reason may name.
    exposure = {spec.pool: measured.samples}
    lacking = no_traffic(judging, exposure, window=spec.window, over=spec.window)
    if lacking is not None:
        raise MeasurementError(lacking, query=measured.query)
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
        reason = f"{counted(measured.samples or 0, 'sample')} of the {spec.min_samples} needed"
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
    threshold = f"<= {events_counted(spec.signal, spec.max_events)}"
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
            reason=f"{events_counted(spec.signal, count)} on the canary in the last "
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
