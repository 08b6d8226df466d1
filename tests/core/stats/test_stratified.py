"""Tests for rolloutd.core.stats.stratified: blocks, dispersion, the stratified look."""

from __future__ import annotations

import math
import random

import pytest

from rolloutd.core.stats.sequential import (
    Segment,
    rate_ratio_test,
    student_t_quantile,
    student_t_upper_tail,
    two_proportion_test,
)
from rolloutd.core.stats.stratified import (
    MAX_BLOCKS,
    MIN_DF,
    Dispersion,
    Tally,
    block_count,
    blocks_from_cuts,
    estimate_dispersion,
    fitted_ratio,
    stratified_test,
    total,
)


def _binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def _clustered_step(rng: random.Random, blocks: int, size: int, share: float) -> list[Tally]:
    """Blocks of 400 sessions whose events come ``size`` at a time (each session has none or
    ``size``), so the canary's count varies ``size`` times as much as a binomial one."""
    found = []
    for _ in range(blocks):
        canary = stable = canary_sessions = 0
        for _session in range(400):
            bad = rng.random() < 0.05
            if rng.random() < share:
                canary_sessions += 1
                canary += size * bad
            else:
                stable += size * bad
        found.append(Tally(canary, canary_sessions * size, stable, (400 - canary_sessions) * size))
    return found


def test_blocks_add_up_to_the_whole_and_a_missing_or_backward_cut_merges_two() -> None:
    """A cut that could not be measured or reads less than the one before is dropped."""
    whole = Tally(10, 100, 90, 1900)
    cuts = [Tally(2, 20, 20, 400), None, Tally(6, 60, 50, 1100), Tally(5, 70, 60, 1200)]
    blocks = blocks_from_cuts(cuts, whole)
    assert blocks == [Tally(2, 20, 20, 400), Tally(4, 40, 30, 700), Tally(4, 40, 40, 800)]
    assert total(blocks) == whole
    # A source that answers every window alike gives one block and empty ones.
    same = blocks_from_cuts([whole, whole], whole)
    assert total(same) == whole and sum(b.events > 0 for b in same) == 1


def test_the_number_of_blocks_follows_the_shortest_block_up_to_the_maximum() -> None:
    """Blocks are never shorter than the gate's window, and at most MAX_BLOCKS a step."""
    assert block_count(299, 300) == 1
    assert block_count(1200, 300) == 4
    assert block_count(48 * 3600, 300) == MAX_BLOCKS
    with pytest.raises(ValueError, match="longer than 0s"):
        block_count(600, 0)


def test_the_fitted_ratio_reproduces_the_observed_canary_events() -> None:
    """One rate ratio across blocks of different canary shares matches the canary's total."""
    blocks = [Tally(3, 100, 40, 1900), Tally(10, 500, 30, 1500), Tally(0, 10, 5, 990)]
    ratio = fitted_ratio(blocks)
    assert ratio is not None
    expected = sum(
        b.events * (b.share or 0) * ratio / ((b.share or 0) * ratio + 1 - (b.share or 0))
        for b in blocks
    )
    assert expected == pytest.approx(13, rel=1e-9)
    assert fitted_ratio([Tally(0, 100, 40, 1900)]) is None  # no canary event: no ratio


def test_dispersion_is_about_one_for_independent_events_and_the_cluster_size_for_clusters() -> None:
    """Averaged over seeded rollouts, Pearson / df is ~1 for independent events and ~3 when
    every bad session has three events (phi = E[size^2] / E[size] = 3)."""
    rng = random.Random(7)
    independent = [
        estimate_dispersion([_clustered_step(rng, 8, 1, 0.25)]).estimate for _ in range(60)
    ]
    clustered = [
        estimate_dispersion([_clustered_step(rng, 8, 3, 0.25)]).estimate for _ in range(60)
    ]
    mean_independent = sum(e or 0 for e in independent) / len(independent)
    mean_clustered = sum(e or 0 for e in clustered) / len(clustered)
    assert 0.75 < mean_independent < 1.3
    assert 2.2 < mean_clustered < 3.8


def test_load_moving_both_pools_together_is_not_dispersion() -> None:
    """Blocks whose rates differ fivefold, the canary's share exact in each, show no excess
    variation: each block is judged against its own total."""
    blocks = [Tally(5 * m, 1000, 95 * m, 19000) for m in (1, 5, 2, 4, 1, 3)]
    dispersion = estimate_dispersion([blocks])
    assert dispersion.estimate == pytest.approx(0.0, abs=1e-9)
    assert dispersion.phi == 1.0


def test_the_bound_needs_degrees_of_freedom_and_is_above_the_estimate() -> None:
    """Too few blocks: no evidence (infinite); then a bound above the estimate, never below 1."""
    rng = random.Random(3)
    few = estimate_dispersion([_clustered_step(rng, 2, 3, 0.25)])
    assert few.df < MIN_DF and math.isinf(few.bound)
    many = estimate_dispersion([_clustered_step(rng, 8, 3, 0.25), _clustered_step(rng, 8, 3, 0.25)])
    assert many.df >= MIN_DF
    assert many.bound >= max(1.0, many.estimate or 0)
    known = estimate_dispersion([_clustered_step(rng, 8, 3, 0.25)], known=1.0)
    assert known.phi == known.bound == 1.0 and known.estimate is None
    assert known.as_evidence()["method"] == "known, not estimated"


def test_evidence_divided_by_the_dispersion_needs_that_many_times_the_events() -> None:
    """Dividing by phi is the same as seeing k/phi of n/phi events; infinity is no evidence."""
    tempered = rate_ratio_test([Segment(24, 96, 0.05)], dispersion=2.0)
    halved = rate_ratio_test([Segment(12, 48, 0.05)])
    assert tempered.log_bf == pytest.approx(halved.log_bf)
    nothing = rate_ratio_test([Segment(1000, 0, 0.05)], dispersion=math.inf)
    assert nothing.log_bf == pytest.approx(0.0) and not nothing.reject
    assert nothing.as_evidence()["dispersion"] is None
    with pytest.raises(ValueError, match="dispersion"):
        rate_ratio_test([Segment(1, 1, 0.05)], dispersion=0.5)


def test_one_stratum_is_the_pooled_two_proportion_test() -> None:
    """With a single block the stratified z is the pooled z times sqrt((T - 1) / T)."""
    block = Tally(180, 3000, 850, 17000)
    look = stratified_test([[block]], alpha=0.04, dispersion=Dispersion(0.0, 0.0, 1))
    pooled = two_proportion_test(180, 3000, 850, 17000, alpha=0.04)
    assert look.statistic == pytest.approx(pooled.z * math.sqrt(19999 / 20000), rel=1e-9)
    assert look.critical == pytest.approx(pooled.critical)
    assert look.reject


def test_a_busier_second_step_on_both_pools_does_not_make_the_canary_look_worse() -> None:
    """Rates 5% then 7.5% on both pools, the canary mostly in the second step: pooling the
    steps rejects; comparing within each step finds nothing."""
    first = Tally(0.05 * 500, 500, 0.05 * 9500, 9500)
    second = Tally(0.075 * 2500, 2500, 0.075 * 7500, 7500)
    pooled = two_proportion_test(
        first.canary_events + second.canary_events,
        3000,
        first.stable_events + second.stable_events,
        17000,
        alpha=0.04,
    )
    look = stratified_test([[first], [second]], alpha=0.04, dispersion=Dispersion(0.0, 0.0, 2))
    assert pooled.reject
    assert look.statistic == pytest.approx(0.0, abs=1e-9) and not look.reject


def test_an_estimated_dispersion_widens_the_look_with_students_t() -> None:
    """The final look divides z by the root of an upper bound on phi and uses t on df; a
    bound at 1 leaves the binomial variance and the normal quantile."""
    blocks = [Tally(40, 1000, 470, 19000), Tally(30, 1000, 480, 19000)]
    wide = stratified_test([blocks], alpha=0.04, dispersion=Dispersion(8.0, 4.0, 5))
    plain = stratified_test([blocks], alpha=0.04, dispersion=Dispersion(1.0, 4.0, 5))
    assert plain.statistic > 2 and plain.dispersion.phi == 1.0
    # Pearson 8 on 4 df: the 80% bound is 8 over chi-square's 20% quantile on 4 df (1.649).
    assert wide.dispersion.phi == pytest.approx(8.0 / 1.649, rel=0.02)
    assert wide.statistic == pytest.approx(plain.statistic / math.sqrt(wide.dispersion.phi))
    assert wide.critical == pytest.approx(student_t_quantile(0.96, 4.0))
    assert plain.critical == pytest.approx(1.750686, abs=1e-5)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.95, 1, 6.313752), (0.95, 10, 1.812461), (0.975, 20, 2.085963), (0.99, 30, 2.457262)],
)
def test_students_t_quantiles_match_the_tables(p: float, df: float, expected: float) -> None:
    """The quantile inverts the upper tail and matches published values."""
    assert student_t_quantile(p, df) == pytest.approx(expected, abs=1e-5)
    assert student_t_upper_tail(student_t_quantile(p, df), df) == pytest.approx(1 - p, rel=1e-6)
