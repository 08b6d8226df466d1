"""Tests of the paired t test on continuous per-case scores."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from rolloutd.core.stats.paired import MIN_PAIRS, paired_score_test, t_lower_tail, t_quantile


def test_the_t_distribution_agrees_with_scipy() -> None:
    """The lower tail and the quantile match scipy's Student t to 1e-9."""
    for t, dof in [(-2.1, 299), (-1.0, 5), (1.3, 20), (-3.0, 1), (0.0, 7)]:
        assert t_lower_tail(t, dof) == pytest.approx(stats.t.cdf(t, dof), abs=1e-9)
    assert t_quantile(0.975, 10) == pytest.approx(stats.t.ppf(0.975, 10), abs=1e-9)


def test_the_p_value_is_scipys_one_sided_paired_t() -> None:
    """With no margin the p-value is scipy's ttest_rel with alternative 'less'."""
    rng = random.Random(3)
    base = [rng.random() for _ in range(60)]
    canary = [min(1.0, max(0.0, b - 0.05 + rng.gauss(0, 0.1))) for b in base]
    test = paired_score_test(base, canary, margin=0.0, alpha=0.05)
    expected = stats.ttest_rel(canary, base, alternative="less").pvalue
    assert test.p_value == pytest.approx(expected, rel=1e-9)


def test_identical_scores_do_not_fire_and_a_uniform_loss_does() -> None:
    """Equal scores give p = 1; every case losing the same amount gives p = 0."""
    base = [0.8] * 30
    assert paired_score_test(base, base, margin=0.0, alpha=0.05).p_value == 1.0
    lower = paired_score_test(base, [0.7] * 30, margin=0.0, alpha=0.05)
    assert lower.fires and lower.p_value == 0.0
    within = paired_score_test(base, [0.7] * 30, margin=0.2, alpha=0.05)
    assert not within.fires


def test_the_margin_lets_a_small_loss_pass() -> None:
    """A 3-point mean loss fires with no margin and not with a 10-point margin."""
    rng = random.Random(5)
    base = [rng.random() for _ in range(300)]
    canary = [b - 0.03 + rng.gauss(0, 0.05) for b in base]
    assert paired_score_test(base, canary, margin=0.0, alpha=0.01).fires
    assert not paired_score_test(base, canary, margin=0.10, alpha=0.01).fires


def test_too_few_pairs_never_fire() -> None:
    """Below the minimum number of pairs the test is not made, however large the loss."""
    n = MIN_PAIRS - 1
    assert not paired_score_test([1.0] * n, [0.0] * n, margin=0.0, alpha=0.05).fires


def test_bad_numbers_are_refused() -> None:
    """Unequal lengths, NaN scores and a negative margin raise ValueError."""
    with pytest.raises(ValueError, match="baseline scores"):
        paired_score_test([1.0], [1.0, 0.5], margin=0.0, alpha=0.05)
    with pytest.raises(ValueError, match="finite"):
        paired_score_test([math.nan] * 30, [1.0] * 30, margin=0.0, alpha=0.05)
    with pytest.raises(ValueError, match="margin"):
        paired_score_test([1.0] * 30, [1.0] * 30, margin=-0.1, alpha=0.05)
