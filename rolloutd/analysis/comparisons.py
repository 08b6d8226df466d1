"""Canary-vs-stable judges and the capacity watch: statistics that stay valid at every tick.

``compare`` tests event rates (escalations, timeouts, schema violations) with the one-sided
rate-ratio mixture over the events since the gate's first step was verified, each step with
its own canary share: checking the cumulative data at every tick keeps the false-alarm rate
at its alpha (an anytime-valid test), so there is no "peeking" penalty, and the evidence of
the 5% step carries into the 25% one. A small regression (escalations 5% -> 6%) needs
more events than an every-tick test can wait for, so by default the gate also makes one
*final look* when the last step carrying it has baked: a one-sided two-proportion test over
all of its steps. The every-tick test spends ``sequential_share`` of alpha and the final look
the rest, so the whole rollout's false-alarm rate stays at alpha (a union bound).

``latency`` bounds the canary's quantile from Prometheus histogram buckets (time-uniform
bounds at bucket boundaries, see ``rolloutd.analysis.quantiles``) and flags "slower than the
target" or "slower than stable x max_ratio" only when the bound says so. Without buckets
(a source that only has a point estimate) it compares the estimate with the target and
says so in the evidence: that fallback is not anytime-valid.

``capacity`` compares prompt+output p99 with the plan's ``max_seq_len`` and KV occupancy
with its limit; failing it means the capacity analysis the change was planned on is wrong.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from datetime import datetime
from typing import Any

from rolloutd.actions import Verdict
from rolloutd.analysis.base import Evaluation, Judging, Measurement, MeasurementError, finite
from rolloutd.analysis.quantiles import compare_latency
from rolloutd.analysis.sequential import (
    Segment,
    rate_ratio_test,
    traffic_share,
    two_proportion_test,
)
from rolloutd.plan import CapacityGate, CompareGate, GateSpec, LatencyGate

CAPACITY_INVALID = "the capacity analysis is invalid: rerun it before scaling further"


def judge_compare(spec: GateSpec, judging: Judging) -> Evaluation:
    """Canary events vs stable events, given each pool's exposure (``samples``).

    Every tick: the anytime-valid test on the step's cumulative counts. At the last step
    carrying the gate, with ``final_look``: no pass before the bake is over, then one
    fixed-horizon test over all of the gate's steps; the two share ``alpha``.
    """
    assert isinstance(spec, CompareGate)
    window = judging.since_step_start(spec.window)
    canary = judging.source.measure(spec.signal, "canary", window, judging.now)
    stable = judging.source.measure(spec.signal, "stable", window, judging.now)
    k = finite(canary, spec.signal, "canary")
    stable_events = finite(stable, spec.signal, "stable")
    if canary.samples is None or stable.samples is None:
        raise MeasurementError(
            f"{spec.signal} has no exposure counts (sessions or requests) to compare rates",
            query=canary.query,
        )
    # Only a step gate makes a final look; a trigger's every-tick test keeps all of alpha.
    looks = spec.final_look and judging.role == "step"
    alpha = spec.alpha * (spec.sequential_share if looks else 1.0)
    earlier = _earlier_segments(spec, judging)
    try:
        rho = traffic_share(canary.samples, stable.samples)
        current = Segment(k, stable_events, rho)
        result = rate_ratio_test([*(s for s, _ in earlier), current], alpha=alpha)
    except ValueError as exc:
        raise MeasurementError(str(exc), query=canary.query) from None
    canary_rate = k / canary.samples if canary.samples else None
    stable_rate = stable_events / stable.samples if stable.samples else None
    evidence: dict[str, Any] = {
        **result.as_evidence(),
        "canary": {"events": k, "exposure": canary.samples, "rate": canary_rate},
        "stable": {"events": stable_events, "exposure": stable.samples, "rate": stable_rate},
        "window_seconds": window.total_seconds(),
        "sequential_alpha": alpha,
        "earlier_steps": [detail for _, detail in earlier],
    }
    evaluation = Evaluation(
        judging.name,
        judging.role,
        Verdict.PASS,
        judging.now,
        value=canary_rate,
        threshold=f"not above stable (BF < {1 / alpha:g})",
        query=canary.query,
        samples=int(canary.samples + stable.samples),
        statistic=result.log_bf,
        evidence=evidence,
    )
    if result.reject:
        reason = (
            f"canary {spec.signal} rate {_pct(canary_rate)} vs stable {_pct(stable_rate)}: "
            f"Bayes factor {result.bf:.3g} >= {1 / alpha:g}"
        )
        return _with(evaluation, Verdict.FAIL, reason)
    final = judging.final if looks else None
    if final is not None:
        if final.end is None:
            return _with(evaluation, Verdict.PENDING, "the final look comes when the bake is over")
        look = _final_look(spec, judging, final.start, final.end)
        evaluation = _replace_evidence(evaluation, {"final_look": look})
        if look["reject"]:
            reason = (
                f"final look over {look['window_seconds']:.0f}s: canary {spec.signal} rate "
                f"{_pct(look['canary_rate'])} vs stable {_pct(look['stable_rate'])}, "
                f"z {look['z']:.2f} > {look['critical_z']:.2f}"
            )
            return _with(evaluation, Verdict.FAIL, reason)
    needed = spec.min_events
    if needed is None:
        needed = events_to_fail(min(rho, 0.99), alpha)
    if result.total_events < needed:
        reason = f"{result.total_events:g} events of the {needed} needed"
        if spec.min_events is None:
            reason += " (the fewest that could show the canary worse)"
        return _with(evaluation, Verdict.PENDING, reason)
    return evaluation


@functools.lru_cache(maxsize=256)
def _events_to_fail(rho_permille: int, alpha: float) -> int:
    rho = max(rho_permille, 1) / 1000
    for n in range(1, 100_000):
        if rate_ratio_test([Segment(n, 0, rho)], alpha=alpha).reject:
            return n
    return 100_000


def events_to_fail(rho: float, alpha: float) -> int:
    """The fewest events that, all on the canary at share ``rho``, reject at ``alpha``: below
    it the test cannot fail, so a pass would say nothing."""
    return _events_to_fail(round(rho * 1000), alpha)


def _earlier_segments(spec: CompareGate, judging: Judging) -> list[tuple[Segment, dict[str, Any]]]:
    """Each earlier step's counts, asked at its end, with its own canary share: one
    rate-ratio test across steps stays anytime-valid while the weight changes."""
    found = []
    for start, end in judging.earlier:
        window = end - start
        canary = judging.source.measure(spec.signal, "canary", window, end)
        stable = judging.source.measure(spec.signal, "stable", window, end)
        k_c, k_s = finite(canary, spec.signal, "canary"), finite(stable, spec.signal, "stable")
        if not canary.samples or not stable.samples:
            continue  # no exposure on a pool then: no evidence either way
        rho = traffic_share(canary.samples, stable.samples)
        detail = {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "canary_events": k_c,
            "stable_events": k_s,
            "canary_share": rho,
        }
        found.append((Segment(k_c, k_s, rho), detail))
    return found


def _final_look(
    spec: CompareGate, judging: Judging, start: datetime, end: datetime
) -> dict[str, Any]:
    """The fixed-horizon test over ``[start, end]``, asked at ``end`` so every look sees the
    same data; it gets the share of alpha the sequential test leaves."""
    window = end - start
    canary = judging.source.measure(spec.signal, "canary", window, end)
    stable = judging.source.measure(spec.signal, "stable", window, end)
    k_c = finite(canary, spec.signal, "canary")
    k_s = finite(stable, spec.signal, "stable")
    if canary.samples is None or stable.samples is None:
        raise MeasurementError(f"{spec.signal} has no exposure counts", query=canary.query)
    try:
        look = two_proportion_test(
            k_c,
            canary.samples,
            k_s,
            stable.samples,
            alpha=spec.alpha * (1.0 - spec.sequential_share),
        )
    except ValueError as exc:
        raise MeasurementError(f"final look: {exc}", query=canary.query) from None
    return {
        **look.as_evidence(),
        "start": start.isoformat(),
        "end": end.isoformat(),
        "window_seconds": window.total_seconds(),
        "canary": {"events": k_c, "exposure": canary.samples},
        "stable": {"events": k_s, "exposure": stable.samples},
    }


def judge_latency(spec: GateSpec, judging: Judging) -> Evaluation:
    """The canary's p95 against the target and against stable's p95 x ``max_ratio``."""
    assert isinstance(spec, LatencyGate)
    window = judging.since_step_start(spec.window)
    canary = judging.source.measure(spec.signal, "canary", window, judging.now)
    estimate = finite(canary, spec.signal, "canary")
    if spec.max_ratio is not None and judging.idle == "stable":
        # At 100% there is no stable traffic to compare with: the target alone applies.
        spec = spec.model_copy(update={"max_ratio": None})
    stable: Measurement | None = None
    if spec.max_ratio is not None:
        stable = judging.source.measure(spec.signal, "stable", window, judging.now)
    threshold = f"p95 < {spec.target_seconds:g}s" + (
        f" and < {spec.max_ratio:g}x stable" if spec.max_ratio else ""
    )
    evaluation = Evaluation(
        judging.name,
        judging.role,
        Verdict.PASS,
        judging.now,
        value=estimate,
        threshold=threshold,
        query=canary.query,
        samples=canary.samples,
    )
    if spec.min_samples and (canary.samples or 0) < spec.min_samples:
        reason = f"{canary.samples or 0} samples of the {spec.min_samples} needed"
        return _with(evaluation, Verdict.PENDING, reason)
    buckets = canary.raw.get("buckets")
    if not buckets:
        return _latency_point_estimate(spec, evaluation, estimate)
    stable_buckets = stable.raw.get("buckets") if stable is not None else None
    if spec.max_ratio is not None and not stable_buckets:
        raise MeasurementError(f"no {spec.signal} histogram for stable", query=canary.query)
    # Against stable, alpha is shared: half for the quantile bounds, half for the rate of
    # requests slower than the target (a union bound keeps the gate's false alarms at alpha).
    alpha = LATENCY_ALPHA / 2 if stable_buckets else LATENCY_ALPHA
    try:
        comparison = compare_latency(
            _as_buckets(buckets),
            _as_buckets(stable_buckets) if stable_buckets else None,
            target_seconds=spec.target_seconds,
            max_ratio=spec.max_ratio,
            alpha=alpha,
        )
    except ValueError as exc:
        raise MeasurementError(str(exc), query=canary.query) from None
    evaluation = _replace_evidence(
        evaluation,
        {"method": "time-uniform bounds on histogram buckets", **comparison.as_evidence()},
    )
    if comparison.regressed:
        which = "the target" if comparison.slower_than_target else "stable"
        lower = comparison.canary.lower
        reason = f"canary p95 is at least {lower:.3g}s: slower than {which} ({threshold})"
        return _with(evaluation, Verdict.FAIL, reason)
    if stable_buckets and spec.max_ratio is not None:
        slow = _slow_requests(spec, judging, buckets, stable_buckets, alpha)
        if slow is not None:
            evaluation = _replace_evidence(evaluation, {"slow_requests": slow})
            if slow["reject"]:
                reason = (
                    f"{_pct(slow['canary_share'])} of canary requests take over "
                    f"{slow['edge_seconds']:g}s against {_pct(slow['stable_share'])} on "
                    f"stable: more than {spec.max_ratio:g}x (Bayes factor {slow['bf']:.3g})"
                )
                return _with(evaluation, Verdict.FAIL, reason)
    return evaluation


LATENCY_ALPHA = 0.05
"""The latency gate's false-alarm rate, however often it is checked."""


def _as_buckets(raw: Any) -> list[tuple[float, float]]:
    return [(float(le), float(n)) for le, n in raw]


def _above(buckets: list[tuple[float, float]], edge: float) -> tuple[float, float]:
    """(observations above ``edge``, all observations) from cumulative buckets."""
    total = max((n for _, n in buckets), default=0.0)
    within = next((n for le, n in buckets if le == edge), 0.0)
    return total - within, total


def _slow_requests(
    spec: LatencyGate,
    judging: Judging,
    buckets: Any,
    stable_buckets: Any,
    alpha: float,
) -> dict[str, Any] | None:
    """Requests slower than the target, canary vs stable: a rate-ratio test (across the
    gate's steps, each with its canary share) of "the canary's rate is more than
    ``max_ratio`` times stable's". It sees a slower tail long before a p95 bound does."""
    canary, stable = _as_buckets(buckets), _as_buckets(stable_buckets)
    edges = sorted(le for le, _ in canary if math.isfinite(le) and le >= spec.target_seconds)
    if not edges:
        return None  # the histogram stops below the target: nothing to count
    edge, ratio = edges[0], spec.max_ratio or 1.0
    found = []
    for start, end in judging.earlier:
        window = end - start
        c = judging.source.measure(spec.signal, "canary", window, end).raw.get("buckets")
        s = judging.source.measure(spec.signal, "stable", window, end).raw.get("buckets")
        if c and s:
            found.append(_slow_segment(_as_buckets(c), _as_buckets(s), edge, ratio))
    found.append(_slow_segment(canary, stable, edge, ratio))
    segments = [seg for seg in found if seg is not None]
    if not segments:
        return None
    result = rate_ratio_test([seg for seg, _ in segments], alpha=alpha)
    slow_c, n_c = _above(canary, edge)
    slow_s, n_s = _above(stable, edge)
    return {
        "method": "rate-ratio mixture on requests slower than the target, one-sided",
        "edge_seconds": edge,
        "max_ratio": ratio,
        "canary_share": slow_c / n_c if n_c else None,
        "stable_share": slow_s / n_s if n_s else None,
        "bf": result.bf if math.isfinite(result.bf) else None,
        "alpha": alpha,
        "reject": result.reject,
        "steps": [detail for _, detail in segments],
    }


def _slow_segment(
    canary: list[tuple[float, float]], stable: list[tuple[float, float]], edge: float, ratio: float
) -> tuple[Segment, dict[str, Any]] | None:
    """One step's slow requests with the canary share shifted so that "rate ratio <= 1"
    means "canary's rate <= ratio x stable's" (``rho' = rho r / (rho r + 1 - rho)``)."""
    slow_c, n_c = _above(canary, edge)
    slow_s, n_s = _above(stable, edge)
    if n_c <= 0 or n_s <= 0:
        return None
    rho = n_c / (n_c + n_s)
    shifted = rho * ratio / (rho * ratio + 1.0 - rho)
    detail = {"canary_slow": slow_c, "canary": n_c, "stable_slow": slow_s, "stable": n_s}
    return Segment(slow_c, slow_s, shifted), detail


def _latency_point_estimate(
    spec: LatencyGate, evaluation: Evaluation, estimate: float
) -> Evaluation:
    evaluation = _replace_evidence(
        evaluation, {"method": "point estimate against the target (no histogram buckets)"}
    )
    if estimate >= spec.target_seconds:
        reason = f"canary p95 {estimate:.3g}s is not under the {spec.target_seconds:g}s target"
        return _with(evaluation, Verdict.FAIL, reason)
    return evaluation


def judge_capacity(spec: GateSpec, judging: Judging) -> Evaluation:
    """Prompt+output p99 inside ``max_seq_len`` (with the margin) and KV usage under its limit."""
    assert isinstance(spec, CapacityGate)
    capacity = judging.plan.capacity
    if capacity is None:
        raise MeasurementError("the plan has no 'capacity' section to check against")
    now = judging.now
    tokens = judging.source.measure("sequence_tokens_p99", "canary", spec.window, now)
    kv = judging.source.measure("kv_cache_usage", "canary", spec.window, now)
    p99 = finite(tokens, "sequence_tokens_p99", "canary")
    usage = finite(kv, "kv_cache_usage", "canary")
    limit = capacity.max_seq_len * (1.0 - spec.margin)
    evaluation = Evaluation(
        judging.name,
        judging.role,
        Verdict.PASS,
        now,
        value=p99,
        threshold=f"p99 tokens < {limit:g}, KV usage <= {spec.kv_usage_max:g}",
        query=tokens.query,
        samples=tokens.samples,
        evidence={
            "sequence_tokens_p99": p99,
            "max_seq_len": capacity.max_seq_len,
            "margin": spec.margin,
            "kv_cache_usage": usage,
            "kv_usage_max": spec.kv_usage_max,
            "kv_query": kv.query,
        },
    )
    problems = []
    if p99 >= limit:
        problems.append(f"prompt+output p99 {p99:.0f} tokens reaches max_seq_len {limit:g}")
    if usage > spec.kv_usage_max:
        problems.append(f"KV-cache usage {usage:.2f} is above {spec.kv_usage_max:g}")
    if problems:
        return _with(evaluation, Verdict.FAIL, f"{CAPACITY_INVALID} ({'; '.join(problems)})")
    return evaluation


def _with(evaluation: Evaluation, verdict: Verdict, reason: str) -> Evaluation:
    return replace(evaluation, verdict=verdict, reason=reason)


def _replace_evidence(evaluation: Evaluation, evidence: dict[str, Any]) -> Evaluation:
    return replace(evaluation, evidence={**evaluation.evidence, **evidence})


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.2%}"
