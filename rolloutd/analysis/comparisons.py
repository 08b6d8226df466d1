"""Canary-vs-stable judges and the capacity watch: statistics that stay valid at every tick.

``compare`` tests event rates (escalations, timeouts, schema violations) with the one-sided
Beta-binomial mixture over the events since the step's weight was verified: checking the
cumulative data at every tick keeps the false-alarm rate at alpha (an anytime-valid test), so
there is no "peeking" penalty. The evidence restarts at each step; alpha is split evenly across
the steps that carry the gate, so the whole rollout's false-alarm rate stays at alpha.

``latency`` bounds the canary's quantile from Prometheus histogram buckets (time-uniform
bounds at bucket boundaries, see ``rolloutd.analysis.quantiles``) and flags "slower than the
target" or "slower than stable x max_ratio" only when the bound says so. Without buckets
(a source that only has a point estimate) it compares the estimate with the target and
says so in the evidence: that fallback is not anytime-valid.

``capacity`` compares prompt+output p99 with the plan's ``max_seq_len`` and KV occupancy
with its limit; failing it means the capacity analysis the change was planned on is wrong.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rolloutd.actions import Verdict
from rolloutd.analysis.base import Evaluation, Judging, Measurement, MeasurementError, finite
from rolloutd.analysis.quantiles import compare_latency
from rolloutd.analysis.sequential import beta_binomial_test, traffic_share
from rolloutd.plan import CapacityGate, CompareGate, GateSpec, LatencyGate

CAPACITY_INVALID = "the capacity analysis is invalid: rerun it before scaling further"


def judge_compare(spec: GateSpec, judging: Judging) -> Evaluation:
    """Canary events vs stable events, given each pool's exposure (``samples``)."""
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
    steps = sum(1 for step in judging.plan.steps if judging.name in step.gates) or 1
    alpha = spec.alpha / steps
    try:
        rho = traffic_share(canary.samples, stable.samples)
        result = beta_binomial_test(k, stable_events, rho, alpha=alpha)
    except ValueError as exc:
        raise MeasurementError(str(exc), query=canary.query) from None
    canary_rate = k / canary.samples if canary.samples else None
    stable_rate = stable_events / stable.samples if stable.samples else None
    evidence: dict[str, Any] = {
        **result.as_evidence(),
        "canary": {"events": k, "exposure": canary.samples, "rate": canary_rate},
        "stable": {"events": stable_events, "exposure": stable.samples, "rate": stable_rate},
        "window_seconds": window.total_seconds(),
        "alpha_per_step": alpha,
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
    if result.total_events < spec.min_events:
        reason = f"{result.total_events:g} events of the {spec.min_events} needed"
        return _with(evaluation, Verdict.PENDING, reason)
    return evaluation


def judge_latency(spec: GateSpec, judging: Judging) -> Evaluation:
    """The canary's p95 against the target and against stable's p95 x ``max_ratio``."""
    assert isinstance(spec, LatencyGate)
    window = judging.since_step_start(spec.window)
    canary = judging.source.measure(spec.signal, "canary", window, judging.now)
    estimate = finite(canary, spec.signal, "canary")
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
    try:
        comparison = compare_latency(
            [(float(le), float(n)) for le, n in buckets],
            [(float(le), float(n)) for le, n in stable_buckets] if stable_buckets else None,
            target_seconds=spec.target_seconds,
            max_ratio=spec.max_ratio,
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
    return evaluation


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
