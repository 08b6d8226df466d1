"""Spreading a canary percentage over several HAProxy servers per pool."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutd.routers.haproxy import MAX_WEIGHT, pool_weights

sizes = st.integers(min_value=1, max_value=12)
percents = st.integers(min_value=0, max_value=100)


def test_the_reference_pools_get_even_weights_in_the_exact_ratio() -> None:
    """Three stable servers and one canary at 5%: canary 10, stable 64/63/63 (10 of 200)."""
    assert pool_weights(5, stable=3, canary=1) == ([10], [64, 63, 63])


@given(percent=percents, stable=sizes, canary=sizes)
def test_the_canary_share_of_the_weights_is_exactly_the_percent(
    percent: int, stable: int, canary: int
) -> None:
    """For any pool sizes the canary's share of all weight is exactly P%, each weight ≤ 256."""
    canary_weights, stable_weights = pool_weights(percent, stable=stable, canary=canary)
    assert len(canary_weights) == canary and len(stable_weights) == stable
    assert all(0 <= w <= MAX_WEIGHT for w in canary_weights + stable_weights)
    total = sum(canary_weights) + sum(stable_weights)
    assert Fraction(100 * sum(canary_weights), total) == percent
    assert max(canary_weights) - min(canary_weights) <= 1
    assert max(stable_weights) - min(stable_weights) <= 1


@given(stable=sizes, canary=sizes)
def test_the_ends_are_exact(stable: int, canary: int) -> None:
    """0% takes every canary server off the ring; 100% takes every stable server off."""
    assert set(pool_weights(0, stable=stable, canary=canary)[0]) == {0}
    assert set(pool_weights(100, stable=stable, canary=canary)[1]) == {0}


@given(low=percents, high=percents, stable=sizes, canary=sizes)
def test_raising_the_percent_never_lowers_a_canary_or_raises_a_stable_weight(
    low: int, high: int, stable: int, canary: int
) -> None:
    """Weights move monotonically, which is what keeps canary sessions on the canary."""
    low, high = min(low, high), max(low, high)
    canary_low, stable_low = pool_weights(low, stable=stable, canary=canary)
    canary_high, stable_high = pool_weights(high, stable=stable, canary=canary)
    assert all(a <= b for a, b in zip(canary_low, canary_high, strict=True))
    assert all(a >= b for a, b in zip(stable_low, stable_high, strict=True))


@pytest.mark.parametrize(("stable", "canary"), [(0, 1), (1, 0)])
def test_an_empty_pool_is_refused(stable: int, canary: int) -> None:
    """Both pools need a server."""
    with pytest.raises(ValueError, match="at least one server"):
        pool_weights(5, stable=stable, canary=canary)
