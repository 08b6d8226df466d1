"""Latency at matched load: the comparison within shared load bands, on synthetic cells."""

from __future__ import annotations

import math
import random

import pytest

from rolloutd.core.stats.matched import Cell, band_of, compare_matched
from rolloutd.sim.loadcells import Fleet, step_cells

ONE_TO_ONE_AT_25 = Fleet(canaries=1, stables=1, weight=25)


def _cells(fleet: Fleet, slowdown: float, seed: int, slices: int = 480) -> list[Cell]:
    return [c for s in step_cells(fleet, slices, random.Random(seed), slowdown=slowdown) for c in s]


def _hist(edges_counts: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    total, found = 0.0, []
    for edge, n in edges_counts:
        total += n
        found.append((edge, total))
    return tuple(found)


def test_a_canary_as_fast_at_its_load_is_not_failed_and_resolves() -> None:
    """The same build on a 1:1 fleet at 25% (the canary a third as loaded): no failure, and
    enough requests at matched load to pass."""
    result = compare_matched([_cells(ONE_TO_ONE_AT_25, 1.0, seed=3)], max_ratio=1.0, alpha=0.025)
    assert not result.regressed
    assert result.resolvable
    assert result.judged and result.dispersion >= 1.0


def test_a_canary_slower_at_matched_load_fails_though_idle_flatters_it() -> None:
    """40% slower at every load, yet faster overall because at 10% on a 1:1 fleet it carries
    a ninth of stable's load (an engine whose prefill grows 30% a request in flight): over
    all requests it looks faster, and never fails; within load bands it fails in most steps
    of 8 h (at 30% slower, in about half: vLLM's TTFT buckets are coarse)."""
    fleet = Fleet(canaries=1, stables=1, weight=10, per_request=0.3)
    matched = unmatched = 0
    for seed in range(4):
        cells = _cells(fleet, 1.4, seed=seed, slices=960)
        matched += compare_matched([cells], max_ratio=1.0, alpha=0.025).regressed
        overall = compare_matched([cells], bands=(0.0, 1e9), max_ratio=1.0, alpha=0.025)
        unmatched += overall.regressed
        (band,) = overall.judged
        assert band.canary_slow / band.canary < band.stable_slow / band.stable
    assert matched >= 3
    assert unmatched == 0


def test_no_shared_band_judges_nothing_and_names_stables_bands() -> None:
    """A canary only ever at 0-1 in flight beside a stable at 6-8: nothing is compared, and
    stable's bands above the canary's are reported as not judged."""
    fast = _hist([(0.25, 50), (0.5, 10), (math.inf, 0)])
    slow = _hist([(0.25, 5), (0.5, 40), (math.inf, 15)])
    cells = [Cell("canary", 0.4, fast)] * 3 + [Cell("stable", 7.0, slow)] * 3
    result = compare_matched([cells], min_requests=20)
    assert result.result is None and not result.judged and not result.resolvable
    assert result.unreached() == ["6-8 in flight"]


def test_bands_of_earlier_steps_carry_their_evidence() -> None:
    """Two steps of a slower canary, judged together, give more evidence than the last alone."""
    fleet = Fleet(canaries=1, stables=1, weight=25)
    first, second = _cells(fleet, 1.2, seed=5, slices=120), _cells(fleet, 1.2, seed=6, slices=120)
    alone = compare_matched([second], max_ratio=1.0)
    both = compare_matched([first, second], max_ratio=1.0)
    assert both.result is not None and alone.result is not None
    assert both.result.log_bf > alone.result.log_bf
    assert len(both.judged) > len(alone.judged)


def test_band_of_puts_a_load_in_its_half_open_band() -> None:
    """Edges belong to the band above them; past the last edge the band is open."""
    assert band_of(0.0, (0, 1, 2)) == (0, 1)
    assert band_of(1.0, (0, 1, 2)) == (1, 2)
    assert band_of(5.0, (0, 1, 2)) == (2, None)


@pytest.mark.parametrize(
    ("cells", "kwargs", "message"),
    [
        ([Cell("canary", -1.0, ((math.inf, 1.0),))], {}, "load must be a finite number"),
        ([Cell("canary", 1.0, ((0.5, 3.0), (math.inf, 1.0)))], {}, "not cumulative"),
        ([Cell("canary", 1.0, ((0.5, math.nan), (math.inf, 1.0)))], {}, "finite number"),
        ([], {"bands": (1.0, 2.0)}, "start at 0"),
        ([], {"bands": (0.0, 2.0, 1.0)}, "increasing"),
        ([], {"edge_quantile": 1.0}, "edge_quantile"),
        ([], {"max_ratio": 0.5}, "max_ratio"),
    ],
)
def test_bad_cells_and_settings_are_refused_naming_what(
    cells: list[Cell], kwargs: dict[str, object], message: str
) -> None:
    """Negative or NaN loads and counts, non-cumulative buckets and bad settings raise."""
    with pytest.raises(ValueError, match=message):
        compare_matched([cells], **kwargs)  # type: ignore[arg-type]
