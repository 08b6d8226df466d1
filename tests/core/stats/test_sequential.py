"""Tests for rolloutd.core.stats.sequential: anytime-valid canary-vs-stable rate tests."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import pytest

from rolloutd.core.stats.sequential import (
    Segment,
    beta_binomial_log_bf,
    beta_binomial_test,
    rate_ratio_test,
    traffic_share,
)
from rolloutd.core.stats.sequential import (
    _ratio_grid as ratio_grid,
)


def _beta_pdf(theta: float, a: float, b: float) -> float:
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return math.exp(log_norm + (a - 1) * math.log(theta) + (b - 1) * math.log1p(-theta))


def _integrate(f: Callable[[float], float], low: float, high: float, steps: int = 1000) -> float:
    """Composite Simpson's rule."""
    h = (high - low) / steps
    total = f(low) + f(high)
    total += sum((4 if i % 2 else 2) * f(low + i * h) for i in range(1, steps))
    return total * h / 3


def _mixture_by_integration(k: int, n: int, rho: float, one_sided: bool) -> float:
    a, b = 100 * rho, 100 * (1 - rho)
    low = rho if one_sided else 1e-12

    def prior(t: float) -> float:
        return _beta_pdf(t, a, b)

    def weighted_ratio(t: float) -> float:
        return (t / rho) ** k * ((1 - t) / (1 - rho)) ** (n - k) * prior(t)

    return _integrate(weighted_ratio, low, 1 - 1e-12) / _integrate(prior, low, 1 - 1e-12)


def _binomial_pmf(k: int, n: int, p: float) -> float:
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


@pytest.mark.parametrize("rho", [0.05, 0.25, 0.5])
def test_log_bf_matches_direct_integration_of_the_mixture_for_small_n(rho: float) -> None:
    """For every k of n <= 6 the closed form equals the mixture integrated numerically."""
    for n in range(7):
        for k in range(n + 1):
            for one_sided in (True, False):
                expected = _mixture_by_integration(k, n, rho, one_sided)
                got = math.exp(beta_binomial_log_bf(k, n, rho, one_sided=one_sided))
                assert got == pytest.approx(expected, rel=1e-6), (n, k, one_sided)


def test_two_sided_log_bf_is_the_reference_formula() -> None:
    """Without truncation the log BF is REFERENCE.md's betaln expression, term for term."""

    def betaln(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    for k, n, rho in [(3, 40, 0.05), (0, 10, 0.25), (17, 17, 0.5), (250, 2000, 0.1)]:
        a, b = 100 * rho, 100 * (1 - rho)
        reference = (
            betaln(a + k, b + n - k)
            - betaln(a, b)
            - k * math.log(rho)
            - (n - k) * math.log(1 - rho)
        )
        assert beta_binomial_log_bf(k, n, rho, one_sided=False) == pytest.approx(reference)


@pytest.mark.parametrize("rho", [0.05, 0.3])
def test_bayes_factor_has_mean_one_at_the_null_and_below_one_when_canary_is_better(
    rho: float,
) -> None:
    """Enumerating every k: E[BF_n] is 1 when events split at rho and at most 1 below it."""
    for n in (1, 5, 20, 60):
        at_null = sum(
            _binomial_pmf(k, n, rho) * math.exp(beta_binomial_log_bf(k, n, rho))
            for k in range(n + 1)
        )
        better = sum(
            _binomial_pmf(k, n, rho / 2) * math.exp(beta_binomial_log_bf(k, n, rho))
            for k in range(n + 1)
        )
        assert at_null == pytest.approx(1.0, rel=1e-9)
        assert better <= 1.0


def test_rejects_exactly_when_bf_reaches_one_over_alpha() -> None:
    """The verdict flips where BF crosses 1/alpha, and not before."""
    result = beta_binomial_test(12, 60, 0.05)
    assert result.bf > 1
    just_reached = 1 / result.bf * (1 + 1e-9)
    just_missed = 1 / result.bf * (1 - 1e-9)
    assert beta_binomial_test(12, 60, 0.05, alpha=just_reached).reject
    assert not beta_binomial_test(12, 60, 0.05, alpha=just_missed).reject
    assert result.bf == pytest.approx(math.exp(result.log_bf))


def test_no_events_is_no_evidence() -> None:
    """With n = 0 both tests report BF = 1, no observed share, and no rejection."""
    for result in (
        beta_binomial_test(0, 0, 0.05),
        rate_ratio_test([Segment(0, 0, 0.05), Segment(0, 0, 0.25)]),
    ):
        assert result.log_bf == pytest.approx(0.0, abs=1e-12)
        assert result.bf == pytest.approx(1.0)
        assert result.observed_share is None
        assert not result.reject


def test_a_canary_better_than_stable_never_rejects() -> None:
    """Events split below the canary's share give BF <= 1, however many there are."""
    for n in (10, 100, 1_000, 100_000):
        for share in (0.0, 0.01, 0.049):
            k = math.floor(share * n)
            single = beta_binomial_test(k, n - k, 0.05, alpha=0.5)
            across = rate_ratio_test([Segment(k, n - k, 0.05), Segment(k, n - k, 0.05)], alpha=0.5)
            for result in (single, across):
                assert result.log_bf <= 1e-12
                assert not result.reject


def test_a_clearly_worse_canary_rejects() -> None:
    """Timeouts at five times stable's rate on a 5 % canary are found within a few dozen events."""
    assert beta_binomial_test(12, 48, 0.05).reject
    assert rate_ratio_test([Segment(12, 48, 0.05)]).reject
    assert not beta_binomial_test(3, 57, 0.05).reject


@pytest.mark.parametrize("rho", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf])
def test_a_canary_share_outside_zero_one_raises(rho: float) -> None:
    """rho at or beyond 0 or 1 (no canary traffic, or no stable) is refused with the reason."""
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        beta_binomial_test(1, 10, rho)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        rate_ratio_test([Segment(1, 10, 0.05), Segment(1, 10, rho)])


def test_negative_counts_and_empty_traffic_raise() -> None:
    """Counts must be finite and non-negative; a share of no traffic is undefined."""
    with pytest.raises(ValueError, match="canary events"):
        beta_binomial_test(-1, 10, 0.05)
    with pytest.raises(ValueError, match="stable events"):
        beta_binomial_test(1, math.nan, 0.05)
    with pytest.raises(ValueError, match="no traffic"):
        traffic_share(0, 0)
    with pytest.raises(ValueError, match="at least one segment"):
        rate_ratio_test([])
    assert traffic_share(19, 381) == pytest.approx(0.0475)


def test_rate_ratio_test_is_the_grid_mixture_of_per_step_likelihood_ratios() -> None:
    """Across steps, BF = sum of w(r) * prod_j r**k_j / (1 + rho_j (r - 1))**n_j over the grid."""
    segments = [Segment(4, 70, 0.05), Segment(30, 90, 0.25)]
    log_ratios, _, log_weights = ratio_grid(1.0)
    expected = 0.0
    for log_r, log_w in zip(log_ratios, log_weights, strict=True):
        r = math.exp(log_r)
        term = math.exp(log_w)
        for s in segments:
            n = s.canary_events + s.stable_events
            term *= r**s.canary_events / (1 + s.rho * (r - 1)) ** n
        expected += term
    result = rate_ratio_test(segments)
    assert result.bf == pytest.approx(expected, rel=1e-9)
    assert sum(math.exp(w) for w in log_weights) == pytest.approx(1.0)
    assert result.expected_share == pytest.approx((74 * 0.05 + 120 * 0.25) / 194)


def test_evidence_is_json_safe_even_for_overwhelming_evidence() -> None:
    """as_evidence() serialises to JSON when BF overflows a float."""
    result = beta_binomial_test(5_000, 5_000, 0.05)
    assert result.reject and math.isinf(result.bf)
    document = json.loads(json.dumps(result.as_evidence(), allow_nan=False))
    assert document["bf"] is None and document["reject"] is True


def test_aa_runs_checked_at_every_tick_keep_false_alarms_at_alpha() -> None:
    """300 seeded A/A rollouts, tested every 20 events over two steps, reject <= alpha + margin."""
    rng = random.Random(20240606)
    runs, alpha = 300, 0.05
    single_alarms = across_alarms = 0
    for _ in range(runs):
        counts = [[0, 0], [0, 0]]
        single = across = False
        for step, rho in enumerate((0.05, 0.25)):
            for _tick in range(10):
                for _event in range(20):
                    counts[step][0 if rng.random() < rho else 1] += 1
                segments = [
                    Segment(c, s, r)
                    for (c, s), r in zip(counts, (0.05, 0.25), strict=True)
                    if c + s
                ]
                canary, stable = counts[step]
                single = single or beta_binomial_test(canary, stable, rho, alpha=alpha / 2).reject
                across = across or rate_ratio_test(segments, alpha=alpha).reject
        single_alarms += single
        across_alarms += across
    margin = 3 * math.sqrt(runs * alpha * (1 - alpha))
    assert single_alarms <= runs * alpha + margin
    assert across_alarms <= runs * alpha + margin
