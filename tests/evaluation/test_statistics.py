"""Tests of the paired statistics: exact McNemar, Holm, the max-drop rule and its simulation."""

from __future__ import annotations

import math

import pytest

from rolloutd.evaluation.statistics import (
    PairedCounts,
    drop_interval,
    holm,
    max_drop_fire_probability,
    max_drop_test,
    pair,
    score_statistic,
    simulate_max_drop,
    worse_p_value,
)


def test_pairing_counts_the_four_cells_and_skips_unpaired_cases() -> None:
    """Cases measured on one side only are left out."""
    baseline = {"a": True, "b": True, "c": False, "d": False, "e": True}
    canary = {"a": True, "b": False, "c": True, "d": False, "z": False}
    counts = pair(baseline, canary)
    assert (counts.both_good, counts.canary_worse, counts.canary_better, counts.both_bad) == (
        1,
        1,
        1,
        1,
    )
    assert counts.pairs == 4


def test_the_exact_mcnemar_p_value_is_the_binomial_tail() -> None:
    """P(Bin(m, 1/2) >= b): 8 of 10 discordant against the canary gives 56/1024."""
    assert worse_p_value(PairedCounts(280, 8, 2, 10)) == pytest.approx(56 / 1024)
    assert worse_p_value(PairedCounts(300, 0, 0, 0)) == 1.0
    assert worse_p_value(PairedCounts(290, 0, 10, 0)) == 1.0


def test_holm_adjusts_step_down_and_keeps_order() -> None:
    """Smallest p times m, next times m-1, never decreasing."""
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})


def test_the_score_statistic_is_zero_at_the_observed_drop() -> None:
    """Z(margin) crosses zero where the margin equals the observed drop, and decreases."""
    counts = PairedCounts(250, 12, 3, 35)
    assert score_statistic(counts, counts.drop) == pytest.approx(0.0, abs=1e-9)
    assert score_statistic(counts, 0.0) > score_statistic(counts, 0.01) > 0
    low, high = drop_interval(counts, 0.95)
    assert low < counts.drop < high
    assert score_statistic(counts, low) == pytest.approx(1.959964, abs=1e-4)


def test_the_max_drop_rule_does_not_fire_on_a_small_observed_drop() -> None:
    """Two more wrong cases in 300 (0.7 points) is noise: no alarm."""
    test = max_drop_test(PairedCounts(270, 6, 4, 20), margin=0.01, alpha=0.05)
    assert not test.fires
    assert test.p_value > 0.5


def test_the_max_drop_rule_fires_on_a_large_drop() -> None:
    """Twenty more wrong cases than right ones in 300 (6.7 points) fires."""
    test = max_drop_test(PairedCounts(250, 24, 4, 22), margin=0.01, alpha=0.05)
    assert test.fires
    assert test.interval[0] > 0.01


@pytest.mark.parametrize(("churn", "drop"), [(0.05, 0.0), (0.05, 0.01), (0.05, 0.03)])
def test_the_simulation_agrees_with_the_exact_sum(churn: float, drop: float) -> None:
    """The simulated firing rate is within 4 standard errors of the exact probability."""
    exact = max_drop_fire_probability(300, margin=0.01, alpha=0.05, churn=churn, drop=drop)
    simulated = simulate_max_drop(
        300, margin=0.01, alpha=0.05, churn=churn, drop=drop, runs=4000, seed=3
    )["rule"]
    error = math.sqrt(max(exact * (1 - exact), 1e-4) / 4000)
    assert abs(simulated - exact) < 4 * error


def test_false_alarms_stay_below_alpha_where_the_naive_rule_fails() -> None:
    """With no regression the rule fires under alpha; "observed drop > 1 point" far above it."""
    for churn in (0.02, 0.05, 0.10):
        rates = simulate_max_drop(300, margin=0.01, alpha=0.05, churn=churn, drop=0.0, runs=4000)
        assert rates["rule"] < 0.05
        assert rates["naive"] > 0.05
    boundary = max_drop_fire_probability(300, margin=0.01, alpha=0.05, churn=0.05, drop=0.01)
    assert boundary < 0.07


def test_power_grows_with_the_true_drop() -> None:
    """The rule fires more often the larger the real loss."""
    rates = [
        max_drop_fire_probability(300, margin=0.01, alpha=0.05, churn=0.05, drop=drop)
        for drop in (0.0, 0.02, 0.03, 0.05)
    ]
    assert rates == sorted(rates)
    assert rates[-1] > 0.6
