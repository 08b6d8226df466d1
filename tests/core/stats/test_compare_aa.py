"""A/A rollouts on clustered, overdispersed traffic through ``compare_rates``: the compare
gate fails a clean canary in no more than alpha of them, where the gate before it did not.

Each rollout: 5% then 25% of sessions (measured 4.3% and 21.5%), 100 minutes each at about
100 sessions a minute whose load swings +-30% a minute on both pools, the second step 30%
busier. A session makes 3 requests a minute for 5 minutes; it draws its own timeout
probability (mean 1%, intra-session correlation 0.1), so its timeouts come together. The gate
is judged every minute as a step gate (every-tick test at 20% of alpha, the final look
stratified by block at the end), on blocks cut as ``judge_compare`` cuts them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from rolloutd.core.stats.rates import compare_rates
from rolloutd.core.stats.sequential import Segment, rate_ratio_test, two_proportion_test
from rolloutd.core.stats.stratified import Tally, block_count, blocks_from_cuts

ALPHA, SHARE = 0.05, 0.2
MINUTES, STEP = 200, 100
SHARES = (0.043, 0.215)
WINDOW = 5  # minutes: the gate's window, its shortest block
ROLLOUTS = 1000


def _traffic(
    rng: np.random.Generator, icc: float, canary_rate: float = 0.01
) -> NDArray[np.float64]:
    """Per minute: canary events, canary requests, stable events, stable requests."""
    load = rng.uniform(0.7, 1.3, MINUTES + WINDOW)
    busy = np.where(np.arange(MINUTES + WINDOW) >= STEP, 1.3, 1.0)
    arrivals = rng.poisson(100 * load[:MINUTES])
    start = np.repeat(np.arange(MINUTES), arrivals)
    canary = rng.random(len(start)) < np.where(start >= STEP, SHARES[1], SHARES[0])
    concentration = (1 - icc) / icc
    mean = np.where(canary, canary_rate, 0.01)
    p = rng.beta(mean * concentration, (1 - mean) * concentration)
    most = 1.3 * 1.3
    candidates = rng.binomial(15, np.minimum(1.0, p * most))
    minute = np.repeat(start, candidates) + rng.integers(0, WINDOW, candidates.sum())
    kept = rng.random(len(minute)) < load[minute] * busy[minute] / most
    on_canary = np.repeat(canary, candidates)[kept]
    minute = minute[kept]
    counts = np.zeros((MINUTES + WINDOW, 4))
    counts[:, 0] = np.bincount(minute[on_canary], minlength=MINUTES + WINDOW)
    counts[:, 2] = np.bincount(minute[~on_canary], minlength=MINUTES + WINDOW)
    for offset in range(WINDOW):  # three requests a minute while the session lasts
        counts[:, 1] += 3 * np.bincount(start[canary] + offset, minlength=MINUTES + WINDOW)
        counts[:, 3] += 3 * np.bincount(start[~canary] + offset, minlength=MINUTES + WINDOW)
    return counts[:MINUTES]


def _tally(cumulative: NDArray[np.float64], start: int, end: int) -> Tally:
    c = cumulative[end] - cumulative[start]
    return Tally(float(c[0]), float(c[1]), float(c[2]), float(c[3]))


def _blocks(cumulative: NDArray[np.float64], start: int, end: int) -> list[Tally]:
    count = block_count(end - start, WINDOW)
    cuts: list[Tally | None] = [
        _tally(cumulative, start, start + round((end - start) * i / count)) for i in range(1, count)
    ]
    return blocks_from_cuts(cuts, _tally(cumulative, start, end))


def _segment(tally: Tally) -> Segment:
    assert tally.share is not None
    return Segment(tally.canary_events, tally.stable_events, tally.share)


def _glr(tally: Tally) -> float:
    k, n = tally.canary_events, tally.events
    rho = tally.share or 0.5
    if n <= 0 or k <= n * rho:
        return 0.0
    share = k / n
    value = k * math.log(share / rho)
    return value + ((n - k) * math.log((1 - share) / (1 - rho)) if k < n else 0.0)


def _rollout(counts: NDArray[np.float64]) -> tuple[int | None, bool]:
    """(the minute the compare gate failed, or None; whether the gate before it failed)."""
    cumulative = np.vstack([np.zeros(4), np.cumsum(counts, axis=0)])
    first = _blocks(cumulative, 0, STEP)
    threshold = math.log(1 / (ALPHA * SHARE))
    now_failed: int | None = None
    before_failed = False
    for minute in range(1, MINUTES + 1):
        start = 0 if minute <= STEP else STEP
        current = _tally(cumulative, start, minute)
        if current.share is None:
            continue  # pending: no exposure on a pool yet
        totals = [current] if start == 0 else [_tally(cumulative, 0, STEP), current]
        # No mixture can reject where the largest likelihood ratio cannot.
        if sum(_glr(t) for t in totals) < threshold:
            continue
        segments = [_segment(t) for t in totals]
        before_failed = before_failed or rate_ratio_test(segments, alpha=ALPHA * SHARE).reject
        if now_failed is None:
            steps = [_blocks(cumulative, start, minute)]
            if start:
                steps.insert(0, first)
            if compare_rates(steps, alpha=ALPHA, sequential_share=SHARE).sequential.reject:
                now_failed = minute
    final = [first, _blocks(cumulative, STEP, MINUTES)]
    look = compare_rates(final, alpha=ALPHA, sequential_share=SHARE, final=final).final
    assert look is not None
    pooled = _tally(cumulative, 0, MINUTES)
    old_look = two_proportion_test(
        pooled.canary_events,
        pooled.canary_exposure,
        pooled.stable_events,
        pooled.stable_exposure,
        alpha=ALPHA * (1 - SHARE),
    )
    if now_failed is None and look.reject:
        now_failed = MINUTES
    return now_failed, before_failed or old_look.reject


@pytest.mark.slow
def test_clean_canaries_fail_no_more_than_alpha_on_clustered_overdispersed_traffic() -> None:
    """1,000 seeded A/A rollouts: the compare gate's false-alarm rate is at most alpha plus
    2.33 standard errors (one-sided 99%); the gate before it exceeds that by far."""
    now = before = 0
    for seed in range(ROLLOUTS):
        failed, failed_before = _rollout(_traffic(np.random.default_rng([2024, seed]), 0.1))
        now += failed is not None
        before += failed_before
    margin = 2.33 * math.sqrt(ALPHA * (1 - ALPHA) / ROLLOUTS)
    assert now / ROLLOUTS <= ALPHA + margin, f"{now} of {ROLLOUTS} clean canaries failed"
    assert before / ROLLOUTS > 2 * ALPHA, f"the old gate failed only {before} of {ROLLOUTS}"


@pytest.mark.slow
def test_a_fivefold_timeout_rate_is_still_found_early_in_the_first_step() -> None:
    """Timeouts 1% -> 5% on the same traffic: the every-tick test fails the canary in every
    one of 100 rollouts, in the median within 30 minutes of the 5% step (it may not before
    four 5-minute blocks, 20 minutes, have shown how much the events cluster)."""
    minutes = []
    for seed in range(100):
        failed, _ = _rollout(_traffic(np.random.default_rng([7, seed]), 0.1, canary_rate=0.05))
        assert failed is not None
        minutes.append(failed)
    assert sorted(minutes)[len(minutes) // 2] <= 30
