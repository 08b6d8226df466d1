"""The latency gate with ``match_load``: the target on the canary's own requests, stable
compared at the same concurrency.

Without it, a latency gate compares the canary's quantile with stable's and, while one
canary replica carries less than ``min_load_ratio`` of a stable replica's load, holds every
pass: on a one-to-one fleet that is every step below 41%. With it, the canary is compared
with stable within the load bands both carried (``rolloutd.core.stats.matched``): it passes
at 5% when it is no slower than stable *at the canary's load*, fails when it is slower at
the same load however idle it is, and names the bands it could not judge (the load stable
carries and the canary never reached) in its reason and evidence instead of holding the step.

Alpha is shared (a union bound): half for the time-uniform bound of the canary's quantile
against the target, half for the matched comparison, which is anytime-valid across ticks and
carries the bands of the gate's earlier steps.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from rolloutd.core.actions import Verdict
from rolloutd.core.counts import counted
from rolloutd.core.plan import LatencyGate
from rolloutd.core.stats.matched import DEFAULT_BANDS, Cell, MatchedComparison, compare_matched
from rolloutd.core.stats.quantiles import compare_latency
from rolloutd.gates.base import Evaluation, Judging, MeasurementError, cells_of


def judge_matched(
    spec: LatencyGate,
    judging: Judging,
    evaluation: Evaluation,
    buckets: list[tuple[float, float]] | None,
    alpha: float,
) -> Evaluation:
    """``evaluation`` (the canary's measured quantile) judged against the target and against
    stable at matched load.

    :raises MeasurementError: the source cannot give cells, or a query failed.
    """
    assert spec.match_load is not None and spec.max_ratio is not None
    if buckets:
        target = compare_latency(buckets, None, target_seconds=spec.target_seconds, alpha=alpha / 2)
        evaluation = _evidence(evaluation, {"target": target.as_evidence()})
        if target.regressed:
            reason = (
                f"canary p95 is at least {target.canary.lower:.3g}s at its own load: slower "
                f"than the {spec.target_seconds:g}s target"
            )
            return replace(evaluation, verdict=Verdict.FAIL, reason=reason)
    elif evaluation.value is not None and evaluation.value >= spec.target_seconds:
        reason = (
            f"canary p95 {evaluation.value:.3g}s is not under the {spec.target_seconds:g}s target"
        )
        return replace(evaluation, verdict=Verdict.FAIL, reason=reason)
    comparison = _compare(spec, judging, alpha / 2)
    evaluation = _evidence(evaluation, {"matched_load": comparison.as_evidence()})
    return replace(evaluation, **_verdict(spec, comparison))


def _compare(spec: LatencyGate, judging: Judging, alpha: float) -> MatchedComparison:
    source = judging.source
    match = spec.match_load
    assert match is not None and spec.max_ratio is not None
    stretches = [
        _cells(source, spec, end - start, end, match.slice) for start, end in judging.earlier
    ]
    stretches.append(
        _cells(source, spec, judging.since_step_start(spec.window), judging.now, match.slice)
    )
    try:
        return compare_matched(
            stretches,
            bands=match.bands or DEFAULT_BANDS,
            edge_quantile=match.edge_quantile,
            min_requests=match.min_requests,
            max_ratio=spec.max_ratio,
            alpha=alpha,
            detect_ratio=max(match.detect_ratio, spec.max_ratio * 1.2),
        )
    except ValueError as exc:
        raise MeasurementError(f"{spec.signal} by load: {exc}") from None


def _cells(
    source: object, spec: LatencyGate, window: timedelta, end: Any, slice: timedelta
) -> list[Cell]:
    return [
        *cells_of(source, spec.signal, "canary", window, end, slice),
        *cells_of(source, spec.signal, "stable", window, end, slice),
    ]


def _verdict(spec: LatencyGate, comparison: MatchedComparison) -> dict[str, Any]:
    """The verdict and reason the matched comparison gives (the target already passed)."""
    if comparison.regressed:
        assert comparison.result is not None
        worst = max(comparison.judged, key=_excess)
        return {
            "verdict": Verdict.FAIL,
            "reason": (
                f"canary slower than stable at the same load: at {worst.label}, "
                f"{_share(worst.canary_slow, worst.canary)} of canary requests over "
                f"{worst.edge:g}s against {_share(worst.stable_slow, worst.stable)} on stable, "
                f"more than {spec.max_ratio:g}x across {counted(len(comparison.judged), 'band')} "
                f"(Bayes factor {comparison.result.bf:.3g})"
            ),
            "statistic": comparison.result.log_bf,
        }
    least = spec.match_load.min_requests if spec.match_load else 0
    if not comparison.judged:
        flat = [b.label for b in comparison.not_judged if min(b.canary, b.stable) >= least]
        if flat:
            return {
                "verdict": Verdict.PENDING,
                "reason": (
                    f"at {', '.join(flat)} both pools' requests fall in one bucket of the "
                    f"{spec.signal} histogram: it cannot tell their latencies apart (finer "
                    "bucket edges, or a signal whose requests spread over several)"
                ),
            }
        canary = _bands(comparison, "canary")
        stable = _bands(comparison, "stable")
        return {
            "verdict": Verdict.PENDING,
            "reason": (
                f"no load band with {least} requests on both pools yet (canary at "
                f"{canary or 'none'}, stable at {stable or 'none'}): nothing to compare at "
                "matched load"
            ),
        }
    assert comparison.result is not None
    judged = ", ".join(b.label for b in comparison.judged)
    if not comparison.resolvable:
        return {
            "verdict": Verdict.PENDING,
            "reason": (
                f"{comparison.canary_requests_judged:,.0f} canary requests at matched load "
                f"({judged}): too few yet to see a canary {comparison.detect_ratio:g}x as "
                "often slow as stable"
            ),
            "statistic": comparison.result.log_bf,
        }
    reason = f"no slower than stable at matched load ({judged})"
    unreached = comparison.unreached()
    if unreached:
        reason += f"; not judged at {', '.join(unreached)}: the canary never carried that load"
    return {"verdict": Verdict.PASS, "reason": reason, "statistic": comparison.result.log_bf}


def _excess(band: Any) -> float:
    canary = band.canary_slow / band.canary if band.canary else 0.0
    stable = band.stable_slow / band.stable if band.stable else 0.0
    return float(canary - stable)


def _bands(comparison: MatchedComparison, pool: str) -> str:
    labels = [
        b.label
        for b in (*comparison.judged, *comparison.not_judged)
        if (b.canary if pool == "canary" else b.stable) > 0
    ]
    return ", ".join(dict.fromkeys(labels))


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _evidence(evaluation: Evaluation, more: dict[str, Any]) -> Evaluation:
    return replace(evaluation, evidence={**evaluation.evidence, **more})
