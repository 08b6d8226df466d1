"""Tests for rolloutd.core.stats.quantiles: p95 latency from Prometheus histogram buckets."""

from __future__ import annotations

import bisect
import json
import math
import random

import pytest

from rolloutd.core.stats.quantiles import (
    Bucket,
    compare_latency,
    count_above,
    dkw_constant,
    dkw_radius,
    histogram_quantile,
    quantile_bounds,
)

HAND = [(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (2.0, 98.0), (math.inf, 100.0)]
BOUNDS = [0.25 * 2 ** (i / 8) for i in range(57)]


def _histogram(samples: list[float], bounds: list[float] = BOUNDS) -> list[Bucket]:
    counts = [0] * (len(bounds) + 1)
    for x in samples:
        counts[bisect.bisect_left(bounds, x)] += 1
    cumulative, running = [], 0
    for le, count in zip([*bounds, math.inf], counts, strict=True):
        running += count
        cumulative.append((le, float(running)))
    return cumulative


def _lognormal(rng: random.Random, n: int, median: float, sigma: float = 0.5) -> list[float]:
    return [rng.lognormvariate(math.log(median), sigma) for _ in range(n)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.95, 1.0 + 1.0 * 5 / 8),  # rank 95 in (1, 2]: 5 of its 8
        (0.5, 0.1 + 0.4 * 40 / 50),  # rank 50 in (0.1, 0.5]: 40 of its 50
        (0.05, 0.1 * 5 / 10),  # first bucket interpolates from 0
        (0.99, 2.0),  # rank in +Inf: the highest finite bound
    ],
)
def test_estimate_is_promql_interpolation_on_a_hand_made_histogram(
    q: float, expected: float
) -> None:
    """histogram_quantile interpolates linearly within the bucket holding rank q * total."""
    assert histogram_quantile(q, HAND) == pytest.approx(expected)


def test_estimate_follows_promql_special_cases() -> None:
    """Unsorted and duplicate bounds are merged, and the PromQL NaN / infinity cases hold."""
    shuffled = [HAND[3], HAND[0], (0.5, 30.0), (0.5, 30.0), HAND[4], HAND[2]]
    assert histogram_quantile(0.95, shuffled) == pytest.approx(1.625)
    assert math.isnan(histogram_quantile(0.95, HAND[:-1]))  # no +Inf bucket
    assert math.isnan(histogram_quantile(0.95, [(1.0, 0.0), (math.inf, 0.0)]))
    assert math.isnan(histogram_quantile(math.nan, HAND))
    assert histogram_quantile(-0.1, HAND) == -math.inf
    assert histogram_quantile(1.1, HAND) == math.inf
    assert histogram_quantile(0.5, [(-1.0, 5.0), (math.inf, 6.0)]) == -1.0
    # A count that dips is lifted to the running maximum, as PromQL's ensureMonotonic does.
    assert histogram_quantile(0.5, [(1.0, 4.0), (2.0, 3.0), (math.inf, 8.0)]) == pytest.approx(1.0)


def test_dkw_radius_matches_howard_and_ramdas_reference_value() -> None:
    """eps(t=1000, t_min=100, alpha=0.05) is confseq's 0.08204769; C beats the closed form."""
    assert dkw_radius(1000, 0.05, t_min=100) == pytest.approx(0.08204769, abs=1e-5)
    for alpha in (0.1, 0.05, 0.01):
        assert dkw_constant(alpha) <= 0.8 * math.log(1612 / alpha)
    assert dkw_radius(99, 0.05, t_min=100) == math.inf


def test_bands_shrink_as_samples_grow() -> None:
    """The DKW radius falls with t, and the p95 bounds of a growing sample tighten around it."""
    radii = [dkw_radius(t, 0.05) for t in (100, 300, 1_000, 10_000, 100_000)]
    assert radii == sorted(radii, reverse=True)
    rng = random.Random(7)
    samples = _lognormal(rng, 40_000, 2.0)
    widths = []
    for n in (500, 5_000, 40_000):
        bounds = quantile_bounds(_histogram(samples[:n]))
        assert bounds.lower is not None and bounds.upper is not None
        widths.append(bounds.upper / bounds.lower)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0]


def test_bounds_hold_at_every_tick_in_a_seeded_simulation() -> None:
    """Over 100 seeded streams checked every 100 samples, bounds exclude the true p95 <= alpha."""
    rng = random.Random(11)
    bounds = [0.5 * 2 ** (i / 4) for i in range(24)]  # quarter-octave buckets, 0.5 s .. 30 s
    true_p95 = 2.0 * math.exp(0.5 * 1.6448536269514722)
    runs, alpha = 100, 0.05
    misses = {"mixture": 0, "dkw": 0}
    for _ in range(runs):
        counts = [0] * (len(bounds) + 1)
        missed = dict.fromkeys(misses, False)
        for _tick in range(10):
            for x in _lognormal(rng, 100, 2.0):
                counts[bisect.bisect_left(bounds, x)] += 1
            running = [sum(counts[: i + 1]) for i in range(len(counts))]
            histogram = [(le, float(c)) for le, c in zip([*bounds, math.inf], running, strict=True)]
            for method in misses:
                b = quantile_bounds(histogram, alpha=alpha / 2, method=method)  # type: ignore[arg-type]
                wrong = (b.lower is not None and b.lower >= true_p95) or (
                    b.upper is not None and b.upper < true_p95
                )
                missed[method] = missed[method] or wrong
        for method, wrong in missed.items():
            misses[method] += wrong
    margin = 3 * math.sqrt(runs * alpha * (1 - alpha))
    assert all(count <= runs * alpha + margin for count in misses.values()), misses


def test_comparison_flags_a_clearly_slower_canary_and_not_an_identical_one() -> None:
    """A canary at twice stable's latency is flagged on both counts; a copy of stable is not."""
    rng = random.Random(3)
    stable = _histogram(_lognormal(rng, 20_000, 2.0))
    slower = _histogram(_lognormal(rng, 2_000, 4.0))
    same = _histogram(_lognormal(rng, 2_000, 2.0))
    flagged = compare_latency(slower, stable, target_seconds=6.0, max_ratio=1.2)
    assert flagged.slower_than_target and flagged.slower_than_stable and flagged.regressed
    for method in ("mixture", "dkw"):
        calm = compare_latency(same, stable, target_seconds=6.0, max_ratio=1.2, method=method)
        assert not calm.regressed, method
    json.dumps(flagged.as_evidence(), allow_nan=False)


def test_no_data_makes_no_claim() -> None:
    """Empty histograms give no estimate, no bounds, and no regression."""
    empty: list[Bucket] = [(1.0, 0.0), (2.0, 0.0), (math.inf, 0.0)]
    bounds = quantile_bounds(empty)
    assert bounds.estimate is None and bounds.lower is None and bounds.upper is None
    assert not compare_latency(empty, empty, target_seconds=0.5, max_ratio=1.1).regressed


def test_malformed_input_raises() -> None:
    """No +Inf bucket, negative counts, or max_ratio without stable data are refused."""
    with pytest.raises(ValueError, match=r"\+Inf"):
        quantile_bounds(HAND[:-1])
    with pytest.raises(ValueError, match=">= 0"):
        quantile_bounds([(1.0, -3.0), (math.inf, -1.0)])
    with pytest.raises(ValueError, match="stable"):
        compare_latency(HAND, None, max_ratio=1.1)
    with pytest.raises(ValueError, match="method"):
        quantile_bounds(HAND, method="magic")  # type: ignore[arg-type]


def test_count_above_uses_the_first_bound_at_or_above_the_threshold() -> None:
    """Slow requests are counted above the first bucket bound >= the threshold."""
    assert count_above(HAND, 0.7) == (10.0, 100.0, 1.0)
    assert count_above(HAND, 1.0) == (10.0, 100.0, 1.0)
    with pytest.raises(ValueError, match="no finite bucket bound"):
        count_above(HAND, 5.0)
