"""Canary-vs-stable judges and the capacity watch: statistics that stay valid at every tick.

``compare`` tests event rates (escalations, timeouts, schema violations) with the one-sided
rate-ratio mixture over the events since the gate's first step was verified, each step with
its own canary share: checking the cumulative data at every tick keeps the false-alarm rate
at its alpha (an anytime-valid test), so there is no "peeking" penalty, and the evidence of
the 5% step carries into the 25% one. The turns of a session share a fate, so timeouts and
schema violations come in clusters: each step is measured in blocks of at least the gate's
``window``, and the evidence is divided by the dispersion the blocks show (an upper bound on
it, every tick; see ``rolloutd.core.stats.stratified``); escalations, once per session, are
not. A small regression (escalations 5% -> 6%) needs more events than an every-tick test can
wait for, so by default the gate also makes one *final look* when the last step carrying it
has baked: a stratified (Cochran-Mantel-Haenszel) test over the blocks of all of its steps,
so a busier second step on both pools is not read as a worse canary. The every-tick test
spends ``sequential_share`` of alpha and the final look the rest, so the whole rollout's
false-alarm rate stays at alpha (a union bound). :func:`compare_rates` is that arithmetic on
counts (``rolloutd.core.stats.rates``); :func:`judge_compare` asks the metrics source for them.

``latency`` bounds the canary's quantile from Prometheus histogram buckets (time-uniform
bounds at bucket boundaries, see ``rolloutd.core.stats.quantiles``) and flags "slower than the
target" or "slower than stable x max_ratio" only when the bound says so. Without buckets
(a source that only has a point estimate) it compares the estimate with the target and
says so in the evidence: that fallback is not anytime-valid.

``capacity`` compares prompt+output p99 with the plan's ``max_seq_len`` and KV occupancy
with its limit; failing it means the capacity analysis the change was planned on is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from rolloutd.core.actions import Verdict
from rolloutd.core.counts import counted
from rolloutd.core.plan import CapacityGate, CompareGate, GateSpec, LatencyGate
from rolloutd.core.stats.quantiles import compare_latency
from rolloutd.core.stats.rates import RateOutcome, compare_rates
from rolloutd.core.stats.sequential import Segment, rate_ratio_test
from rolloutd.core.stats.stratified import Tally, block_count, blocks_from_cuts, total
from rolloutd.gates.base import Evaluation, Judging, Measurement, MeasurementError, finite
from rolloutd.gates.exposure import no_traffic
from rolloutd.gates.matched import judge_matched

CAPACITY_INVALID = "the capacity analysis is invalid: rerun it before scaling further"


def judge_compare(spec: GateSpec, judging: Judging) -> Evaluation:
    """Canary events vs stable events, given each pool's exposure (``samples``).

    Every tick: the anytime-valid test on the gate's steps so far, its evidence divided by
    the dispersion the steps' blocks show. At the last step carrying the gate, with
    ``final_look``: no pass before the bake is over, then one stratified test over every
    block of the gate's steps; the two share ``alpha``. A step whose window holds no
    exposure on a pool yet (a 30 s window at 5% holds a couple of sessions) is *pending*;
    once the step outlasts the gate's ``window``, a pool that should serve and has served
    nothing is no data (:func:`rolloutd.gates.exposure.no_traffic`).
    """
    assert isinstance(spec, CompareGate)
    window = judging.since_step_start(spec.window)
    start = judging.now - window
    step = _blocks(spec, judging, start, judging.now)
    current, query = step.blocks, step.query
    whole = total(current)
    unexposed = _unexposed(spec, judging, whole, query)
    if unexposed is not None:
        return unexposed
    # A gate that decides a step makes a final look at the last step carrying it, whether
    # the tick judges it as a step gate or, when it is a rollback trigger too, as a trigger.
    # A trigger that decides no step has no horizon: its every-tick test keeps all of alpha.
    looks = spec.final_look and judging.plan.decides_a_step(judging.name)
    earlier = _earlier_steps(spec, judging)
    final = judging.final if looks else None
    final_steps = None
    if final is not None and final.end is not None:
        last = current
        if final.end < judging.now:
            step_start = judging.step_started_at or final.start
            last = _blocks(spec, judging, step_start, final.end).blocks
        final_steps = [*(e.blocks for e, _ in earlier), last]
    # A source that answers every window alike cannot show how events cluster: the
    # dispersion is then taken as 1, and the evidence says so.
    resolved = step.resolved and all(e.resolved for e, _ in earlier)
    try:
        comparison = compare_rates(
            [*(e.blocks for e, _ in earlier), current],
            alpha=spec.alpha,
            sequential_share=spec.sequential_share if looks else 1.0,
            final=final_steps,
            min_events=spec.min_events,
            clustered=spec.events_cluster() and resolved,
            looks=final is not None,
        )
    except ValueError as exc:
        raise MeasurementError(str(exc), query=query) from None
    result, alpha = comparison.sequential, comparison.sequential.alpha
    canary_rate = whole.canary_events / whole.canary_exposure
    stable_rate = whole.stable_events / whole.stable_exposure
    evidence: dict[str, Any] = {
        **result.as_evidence(),
        "canary": {
            "events": whole.canary_events,
            "exposure": whole.canary_exposure,
            "rate": canary_rate,
        },
        "stable": {
            "events": whole.stable_events,
            "exposure": whole.stable_exposure,
            "rate": stable_rate,
        },
        "window_seconds": window.total_seconds(),
        "sequential_alpha": alpha,
        "dispersion": comparison.dispersion.as_evidence(),
        "earlier_steps": [detail for _, detail in earlier],
    }
    if spec.events_cluster() and not resolved:
        evidence["dispersion"]["note"] = (
            "the metrics source answers every window alike: how the events cluster cannot be "
            "seen, so they are judged as independent"
        )
    evaluation = Evaluation(
        judging.name,
        judging.role,
        Verdict.PASS,
        judging.now,
        value=canary_rate,
        threshold=f"not above stable (BF < {1 / alpha:g})",
        query=query,
        samples=int(whole.canary_exposure + whole.stable_exposure),
        statistic=result.log_bf,
        evidence=evidence,
    )
    outcome = comparison.outcome(bake_over=judging.bake_over)
    if outcome is RateOutcome.FAIL_EVERY_TICK:
        reason = (
            f"canary {spec.signal} rate {_pct(canary_rate)} vs stable {_pct(stable_rate)}: "
            f"Bayes factor {result.bf:.3g} >= {1 / alpha:g}"
        )
        if result.dispersion > 1:
            reason += f" (evidence divided by dispersion {result.dispersion:.2f})"
        return _with(evaluation, Verdict.FAIL, reason)
    if outcome is RateOutcome.PENDING_FINAL:
        return _with(evaluation, Verdict.PENDING, "the final look comes when the bake is over")
    if final is not None and final.end is not None and comparison.final is not None:
        look = {
            **comparison.final.as_evidence(),
            "start": final.start.isoformat(),
            "end": final.end.isoformat(),
            "window_seconds": (final.end - final.start).total_seconds(),
        }
        evaluation = _replace_evidence(evaluation, {"final_look": look})
        if outcome is RateOutcome.FAIL_FINAL:
            reason = (
                f"final look over {look['window_seconds']:.0f}s: canary {spec.signal} rate "
                f"{_pct(look['canary_rate'])} vs stable {_pct(look['stable_rate'])}, "
                f"stratified z {look['z']:.2f} > {look['critical_z']:.2f}"
            )
            return _with(evaluation, Verdict.FAIL, reason)
    if outcome is RateOutcome.PENDING_DISPERSION:
        reason = (
            f"{counted(comparison.dispersion.blocks, 'block')} of events cannot yet show how "
            "much they cluster (sessions share a fate): no evidence before they can"
        )
        return _with(evaluation, Verdict.PENDING, reason)
    if outcome is RateOutcome.PENDING_EVENTS:
        reason = f"{counted(result.total_events, 'event')} of the {comparison.needed} needed"
        if spec.min_events is None:
            reason += " (the fewest that could show the canary worse)"
        return _with(evaluation, Verdict.PENDING, reason)
    if outcome is RateOutcome.PASS_STEP_OVER:
        # Zero is evidence: a whole step of live traffic on both pools that held too few
        # events to show a difference did not show the canary worse. Later steps carry
        # the gate's evidence on, and a final look, where there is one, still decides.
        reason = (
            f"{counted(result.total_events, 'event')} over the whole step "
            f"({_count(whole.canary_events)} on the canary, {_count(whole.stable_events)} on "
            f"stable): too few to show a difference, and the canary was not worse"
        )
        return _with(evaluation, Verdict.PASS, reason)
    return evaluation


@dataclass(frozen=True)
class _Step:
    """A step's window as measured: its blocks, the query of the whole, and whether the
    source told its cuts apart (the in-memory and file twins answer every window alike)."""

    blocks: list[Tally]
    query: str | None
    resolved: bool


def _blocks(spec: CompareGate, judging: Judging, start: datetime, end: datetime) -> _Step:
    """The counts of ``[start, end]`` in consecutive blocks, from cumulative counts at each
    cut, and the query of the whole window.

    The whole window is asked first, and its failure is the gate's; a cut that cannot be
    asked (a scrape gap then) or that reads less than an earlier one is dropped, merging
    its two blocks.
    """
    whole, query = _cumulative(spec, judging, start, end)
    count = 1
    if spec.events_cluster():
        count = block_count((end - start).total_seconds(), spec.window.total_seconds())
    cuts: list[Tally | None] = []
    for i in range(1, count):
        at = start + (end - start) * i / count
        try:
            cuts.append(_cumulative(spec, judging, start, at)[0])
        except MeasurementError:
            cuts.append(None)  # no usable answer for this cut: its two blocks become one
    measured = [cut for cut in cuts if cut is not None]
    resolved = not measured or any(cut != whole for cut in measured)
    return _Step(blocks_from_cuts(cuts, whole), query, resolved)


def _cumulative(
    spec: CompareGate, judging: Judging, start: datetime, end: datetime
) -> tuple[Tally, str | None]:
    """Events and exposure on both pools from ``start`` to ``end``, asked at ``end``."""
    window = end - start
    canary = judging.source.measure(spec.signal, "canary", window, end)
    stable = judging.source.measure(spec.signal, "stable", window, end)
    k_c, k_s = finite(canary, spec.signal, "canary"), finite(stable, spec.signal, "stable")
    if canary.samples is None or stable.samples is None:
        raise MeasurementError(
            f"{spec.signal} has no exposure counts (sessions or requests) to compare rates",
            query=canary.query,
        )
    return Tally(k_c, float(canary.samples), k_s, float(stable.samples)), canary.query


def _earlier_steps(spec: CompareGate, judging: Judging) -> list[tuple[_Step, dict[str, Any]]]:
    """Each earlier step's blocks, asked at its end, with its own canary share: one
    rate-ratio test across steps stays anytime-valid while the weight changes."""
    found = []
    for start, end in judging.earlier:
        step = _blocks(spec, judging, start, end)
        blocks = step.blocks
        whole = total(blocks)
        if whole.share is None:
            continue  # no exposure on a pool then: no evidence either way
        detail = {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "canary_events": whole.canary_events,
            "stable_events": whole.stable_events,
            "canary_share": whole.share,
            "blocks": len(blocks),
        }
        found.append((step, detail))
    return found


def _empty_pool(whole: Tally) -> str | None:
    if whole.canary_exposure <= 0:
        return "canary"
    if whole.stable_exposure <= 0:
        return "stable"
    return None


def _unexposed(
    spec: CompareGate, judging: Judging, whole: Tally, query: str | None
) -> Evaluation | None:
    """None while both pools have exposure; else *pending* while the step is younger than
    the gate's window (nothing to compare yet).

    :raises MeasurementError: past the window, a pool that should serve has served nothing:
        no data (:func:`rolloutd.gates.exposure.no_traffic`).
    """
    empty = _empty_pool(whole)
    if empty is None:
        return None
    lacking = no_traffic(
        judging,
        {"canary": whole.canary_exposure, "stable": whole.stable_exposure},
        window=spec.window,
    )
    if lacking is not None:
        raise MeasurementError(lacking, query=query)
    window = judging.since_step_start(spec.window)
    return Evaluation(
        judging.name,
        judging.role,
        Verdict.PENDING,
        judging.now,
        threshold="not above stable",
        query=query,
        samples=int(whole.canary_exposure + whole.stable_exposure),
        reason=f"no {empty} exposure in the last {window.total_seconds():.0f}s of this "
        "step yet: nothing to compare",
    )


def judge_latency(spec: GateSpec, judging: Judging) -> Evaluation:
    """The canary's p95 against the target and against stable's p95 x ``max_ratio``."""
    assert isinstance(spec, LatencyGate)
    window = judging.since_step_start(spec.window)
    canary = judging.source.measure(spec.signal, "canary", window, judging.now)
    # Before the value: a canary that served nothing has no latency to read (NaN or 0).
    lacking = no_traffic(judging, {"canary": canary.samples}, window=spec.window)
    if lacking is not None:
        raise MeasurementError(lacking, query=canary.query)
    estimate = finite(canary, spec.signal, "canary")
    if spec.max_ratio is not None and judging.idle == "stable":
        # At 100% there is no stable traffic to compare with: the target alone applies.
        spec = spec.model_copy(update={"max_ratio": None})
    matched = spec.match_load is not None and spec.max_ratio is not None
    stable: Measurement | None = None
    if spec.max_ratio is not None and not matched:
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
        reason = f"{counted(canary.samples or 0, 'sample')} of the {spec.min_samples} needed"
        return _with(evaluation, Verdict.PENDING, reason)
    buckets = canary.raw.get("buckets")
    if matched:
        # Stable's latency at its own (higher) load says nothing of the canary's: compare
        # within the load bands both carried instead (rolloutd.gates.matched).
        try:
            return judge_matched(
                spec, judging, evaluation, _as_buckets(buckets) if buckets else None, LATENCY_ALPHA
            )
        except ValueError as exc:
            raise MeasurementError(str(exc), query=canary.query) from None
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
        {
            "method": "time-uniform bounds on histogram buckets",
            **comparison.as_evidence(),
            "resolution": bucket_resolution(_as_buckets(buckets), spec.target_seconds),
        },
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


def bucket_resolution(buckets: list[tuple[float, float]], target: float) -> dict[str, Any]:
    """The histogram's edges on either side of ``target``: the bounds decide at edges, so a
    p95 anywhere between them reads the same, and a p95 shift smaller than that step can go
    unseen by the bound (the slow-request test, at the edge above the target, is the
    sensitive one)."""
    edges = sorted(le for le, _ in buckets if math.isfinite(le))
    lower = max((e for e in edges if e <= target), default=0.0)
    upper = min((e for e in edges if e > target), default=None)
    return {
        "target_seconds": target,
        "lower_edge": lower,
        "upper_edge": upper,
        "step_fraction": None if upper is None else (upper - lower) / target,
    }


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


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.2%}"
