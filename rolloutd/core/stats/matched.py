"""Latency at matched load: canary against stable within the concurrency both carried.

An engine's time to first token grows with the requests it already holds: a prefill waits
for the batch it joins. At 5% of sessions on a one-canary, one-stable fleet the canary holds
a twentieth of stable's requests, so its latency flatters it, and a floor on the load ratio
(``min_load_ratio``) can only hold such a step until the canary carries stable's load --
never, below a 41% weight. Instead, compare like with like:

* **Cells.** The judged window is cut into slices (``slice``, a few scrapes long). For each
  replica and slice the source gives the latency histogram's increase and the concurrency
  its requests met: the requests in flight (running plus waiting) at each scrape, weighted
  by themselves, at least 1 (``rolloutd.metrics.cells``).
* **Bands.** A cell falls in the load band of that concurrency (edges ``bands``).
  Within a band, canary and stable requests ran at about the same concurrency; a band is
  *shared* when both pools have at least ``min_requests`` requests in it. Stable's bands the
  canary never reached are named as *not judged*: the canary's latency there is unknown.
* **The test.** In each shared band, a request is *slow* above the histogram edge nearest
  stable's ``edge_quantile`` in that band, keeping slow requests stable's minority (chosen from
  stable alone: a canary far slower must not move the edge past its own requests, which with
  vLLM's coarse buckets -- 5 s, then 10 s -- would hide it). Given a band's slow requests, the
  canary's count is binomial with the band's canary share of requests, shifted by ``max_ratio``
  as the slow-request test of the plain latency gate is: each band is one segment of the rate-
  ratio mixture (``rolloutd.core.stats.sequential.rate_ratio_test``), anytime-valid across
  ticks, and the bands of earlier steps carry their evidence forward (each with its own share).
* **Clusters.** Requests of one slice on one replica share its momentary queue, so slow
  requests come in clusters. The Pearson statistic of each pool's cells around that pool's slow
  rate in their band estimates the dispersion ``phi`` (quasi-likelihood, as for the event rates
  in ``rolloutd.core.stats.stratified``) and the evidence is divided by it.

Assumptions (measured in ``bench/matched_load.py``, stated in ``gates/README.md``): within a
band, load explains the latency difference that load causes (bands narrow enough that the
canary is not systematically lighter inside one); the in-flight count at the slice's scrapes
stands for the load each of its requests met; slices hold requests of many sessions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from rolloutd.core.stats.sequential import Segment, SequentialResult, rate_ratio_test

Pool = Literal["canary", "stable"]
Buckets = Sequence[tuple[float, float]]
"""Cumulative histogram buckets: (upper edge ``le``, observations at or below it)."""

DEFAULT_BANDS = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0)
"""Load-band edges in requests in flight per replica: one request apart where a request
more changes the queue most, then half again each band."""


@dataclass(frozen=True)
class Cell:
    """One replica over one slice: its mean load and its latency histogram's increase."""

    pool: Pool
    load: float
    buckets: Buckets
    replica: str = ""


@dataclass(frozen=True)
class BandCount:
    """One load band of one judged stretch: requests and slow requests on each pool."""

    low: float
    high: float | None
    edge: float | None
    canary: float
    canary_slow: float
    stable: float
    stable_slow: float

    @property
    def label(self) -> str:
        """The band as an operator reads it: ``2-3 in flight``."""
        return band_label(self.low, self.high)

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for a gate's evidence."""
        return {
            "band": self.label,
            "edge_seconds": self.edge,
            "canary": self.canary,
            "canary_slow": self.canary_slow,
            "stable": self.stable,
            "stable_slow": self.stable_slow,
        }


@dataclass(frozen=True)
class MatchedComparison:
    """The canary against stable within shared load bands, over every judged stretch."""

    judged: tuple[BandCount, ...]
    not_judged: tuple[BandCount, ...]
    """Bands where only one pool (or too few requests on one) ran: no comparison there."""
    result: SequentialResult | None
    """The rate-ratio mixture over the judged bands (None: no band shared yet)."""
    dispersion: float
    resolvable: bool = False
    """Whether the judged requests could show a canary whose slow rate is ``detect_ratio``
    times stable's: a pass on less is a test that could not have failed."""
    detect_ratio: float = 2.0

    @property
    def regressed(self) -> bool:
        """The canary is slower than stable at the same load, by the test."""
        return self.result is not None and self.result.reject

    @property
    def canary_requests_judged(self) -> float:
        """Canary requests in the bands that were compared."""
        return sum(b.canary for b in self.judged)

    def unreached(self) -> list[str]:
        """Stable's bands above every band the canary was judged in: the load the canary
        never carried, where its latency is unknown."""
        top = max((b.low for b in self.judged), default=-1.0)
        return [b.label for b in self.not_judged if b.stable > 0 and b.low > top]

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for a gate's evidence."""
        found: dict[str, Any] = {
            "method": "slow-request rate ratio within shared load bands (in flight per replica)",
            "dispersion": self.dispersion if math.isfinite(self.dispersion) else None,
            "bands": [b.as_evidence() for b in self.judged],
            "not_judged": [b.as_evidence() for b in self.not_judged],
            "unreached": self.unreached(),
        }
        if self.result is not None:
            found["test"] = self.result.as_evidence()
        found["resolvable"] = self.resolvable
        found["detect_ratio"] = self.detect_ratio
        return found


def band_label(low: float, high: float | None) -> str:
    """``2-3 in flight`` or ``64+ in flight``."""
    return f"{low:g}+ in flight" if high is None else f"{low:g}-{high:g} in flight"


def band_of(load: float, bands: Sequence[float]) -> tuple[float, float | None]:
    """The band ``[low, high)`` that ``load`` falls in (the top band is open)."""
    low: float = bands[0]
    for edge in bands[1:]:
        if load < edge:
            return low, edge
        low = edge
    return low, None


def compare_matched(
    stretches: Sequence[Sequence[Cell]],
    *,
    bands: Sequence[float] = DEFAULT_BANDS,
    edge_quantile: float = 0.7,
    min_requests: float = 20.0,
    max_ratio: float = 1.0,
    alpha: float = 0.05,
    detect_ratio: float = 2.0,
) -> MatchedComparison:
    """Judge the canary's latency against stable's within the load bands both carried.

    ``stretches``: the cells of each step the gate judged (the current step last); a band of
    each stretch is one segment of the test, with that stretch's own canary share.
    ``detect_ratio``: the comparison is *resolvable* once a canary whose slow rate were that
    many times stable's, in each judged band, would make the test reject (expected counts).

    :raises ValueError: bad bands, quantile, ratio or alpha; a cell with a negative or
        non-finite load, or buckets that are not cumulative.
    """
    _check(bands, edge_quantile, max_ratio, min_requests)
    judged: list[BandCount] = []
    not_judged: list[BandCount] = []
    pearson, cells_used, bands_used = 0.0, 0, 0
    for cells in stretches:
        grouped: dict[tuple[float, float | None], list[Cell]] = {}
        for cell in cells:
            if not (math.isfinite(cell.load) and cell.load >= 0):
                raise ValueError(f"a cell's load must be a finite number >= 0, not {cell.load!r}")
            _check_buckets(cell.buckets)
            if _count(cell.buckets) > 0:
                grouped.setdefault(band_of(cell.load, bands), []).append(cell)
        for (low, high), members in sorted(grouped.items(), key=lambda item: item[0][0]):
            band, edge = _band(low, high, members, edge_quantile, min_requests)
            if edge is None:
                not_judged.append(band)
                continue
            judged.append(band)
            for pool in ("canary", "stable"):
                x2, used = _pearson([c for c in members if c.pool == pool], edge)
                pearson += x2
                cells_used += used
                bands_used += 1 if used else 0
    # Quasi-likelihood dispersion, never below 1: the cells' spread around their pool's rate.
    freedom = cells_used - bands_used
    dispersion = max(1.0, pearson / freedom) if freedom > 0 else 1.0
    result, resolvable = None, False
    if judged:
        segments = [_segment(b, max_ratio) for b in judged]
        result = rate_ratio_test(segments, alpha=alpha, dispersion=dispersion)
        worse = [_segment(_worse(b, detect_ratio), max_ratio) for b in judged]
        resolvable = rate_ratio_test(worse, alpha=alpha, dispersion=dispersion).reject
    return MatchedComparison(
        tuple(judged), tuple(not_judged), result, dispersion, resolvable, detect_ratio
    )


def _worse(band: BandCount, ratio: float) -> BandCount:
    """The band as a canary ``ratio`` times slower (in slow rate) than stable would show it."""
    rate = min(1.0, ratio * band.stable_slow / band.stable) if band.stable else 0.0
    return replace(band, canary_slow=band.canary * rate)


def _band(
    low: float, high: float | None, cells: Sequence[Cell], quantile: float, least: float
) -> tuple[BandCount, float | None]:
    """One band's counts and its slow edge (None: not shared by both pools)."""
    canary = [c.buckets for c in cells if c.pool == "canary"]
    stable = [c.buckets for c in cells if c.pool == "stable"]
    n_c, n_s = sum(map(_count, canary)), sum(map(_count, stable))
    edge = None
    if n_c >= least and n_s >= least:
        edge = _pooled_edge(stable, quantile)
    if edge is None:
        return BandCount(low, high, None, n_c, 0.0, n_s, 0.0), None
    slow_c = sum(_above(b, edge) for b in canary)
    slow_s = sum(_above(b, edge) for b in stable)
    return BandCount(low, high, edge, n_c, slow_c, n_s, slow_s), edge


def _pooled_edge(histograms: Sequence[Buckets], quantile: float) -> float | None:
    """The finite bucket edge whose pooled share of ``histograms``' requests above it is nearest to
    ``1 - quantile``, among edges with some requests above and at most half above (None:
    none such). Slow must stay the minority: a rate already above one half cannot be
    ``max_ratio`` times higher on the canary, and the test would have no room to see it."""
    merged: dict[float, float] = {}
    for buckets in histograms:
        for le, n in buckets:
            if math.isfinite(le):
                merged[le] = merged.get(le, 0.0) + n
    total = sum(_count(b) for b in histograms)
    best: tuple[float, float] | None = None
    for le in sorted(merged):
        above = total - merged[le]
        if 0 < above <= total / 2:
            distance = abs(above / total - (1.0 - quantile))
            if best is None or distance < best[0]:
                best = (distance, le)
    return None if best is None else best[1]


def _pearson(cells: Sequence[Cell], edge: float) -> tuple[float, int]:
    """Pearson's statistic of one pool's cells of a band around that pool's slow rate there
    (around both pools' rate, a real difference between them would read as clustering)."""
    counts = [(_above(c.buckets, edge), _count(c.buckets)) for c in cells]
    n = sum(total for _, total in counts)
    p = sum(slow for slow, _ in counts) / n if n else 0.0
    if not 0 < p < 1:
        return 0.0, 0
    return sum((s - t * p) ** 2 / (t * p * (1 - p)) for s, t in counts if t > 0), len(counts)


def _segment(band: BandCount, ratio: float) -> Segment:
    """A band as one segment: the canary's share of the band's requests, shifted so that
    "rate ratio <= 1" means "canary's slow rate <= ratio x stable's"."""
    rho = band.canary / (band.canary + band.stable)
    shifted = rho * ratio / (rho * ratio + 1.0 - rho)
    return Segment(band.canary_slow, band.stable_slow, shifted)


def _count(buckets: Buckets) -> float:
    return max((n for _, n in buckets), default=0.0)


def _above(buckets: Buckets, edge: float) -> float:
    within = max((n for le, n in buckets if le <= edge), default=0.0)
    return _count(buckets) - within


def _check_buckets(buckets: Buckets) -> None:
    previous = -math.inf
    for le, n in sorted(buckets):
        if not (math.isfinite(n) and n >= 0) or math.isnan(le):
            raise ValueError(f"a bucket count must be a finite number >= 0, not {n!r} (le {le})")
        if n + 1e-9 < previous:
            raise ValueError(f"buckets are not cumulative: {n:g} at le {le:g} after {previous:g}")
        previous = n


def _check(bands: Sequence[float], quantile: float, ratio: float, least: float) -> None:
    if not bands or any(not math.isfinite(b) for b in bands) or list(bands) != sorted(set(bands)):
        raise ValueError(f"bands must be increasing finite edges, not {list(bands)!r}")
    if not 0 < quantile < 1:
        raise ValueError(f"edge_quantile must be between 0 and 1, not {quantile!r}")
    if not (math.isfinite(ratio) and ratio >= 1):
        raise ValueError(f"max_ratio must be a number >= 1, not {ratio!r}")
    if not least >= 1:
        raise ValueError(f"min_requests must be at least 1, not {least!r}")
    if bands[0] != 0:
        raise ValueError(f"bands must start at 0, not {bands[0]!r}")
