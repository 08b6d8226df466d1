"""Rate comparisons that keep their level on real traffic: dispersion and a stratified look.

The rate-ratio tests of ``rolloutd.core.stats.sequential`` take each bad event as a draw that
lands on the canary with probability rho. On agent traffic it is not one: the turns of a
session share its pool, its prompt and its fate, so timeouts and schema violations come in
clusters, and the canary's share of them varies more than a binomial share does. Across
steps, rates rise and fall on both pools together (a busier hour), and pooling the steps
compares a canary that lived mostly in the later step with a stable that lived in both.

Two remedies, computed from the counts Prometheus gives:

* **Dispersion** (quasi-likelihood; Wedderburn 1974, McCullagh & Nelder 1989 §4.5). Each
  step's window is cut into consecutive blocks. Given the events of a block, the canary's
  count has mean ``n theta`` and, with clusters, variance ``phi n theta (1 - theta)``; the
  Pearson statistic of the blocks around one fitted rate ratio estimates ``phi``, and a
  lag-one term adds the covariance a session spanning a cut leaves between two neighbouring
  blocks. Each block is judged against its own total, so load that moves on both pools at
  once changes the totals, not the canary's share of them, and does not count as dispersion.
  The tests then divide their evidence by ``phi``: a cluster of ``phi`` events counts as one.
* **Stratification** (Cochran 1954; Mantel & Haenszel 1959). The final look sums, over the
  blocks of every step, the canary's events minus those expected at that block's own canary
  share, so a block is only ever compared with stable at the same time and weight.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from rolloutd.core.stats.sequential import student_t_quantile

#: At most this many blocks per step: each cut costs two measurements per tick.
MAX_BLOCKS = 8


@dataclass(frozen=True)
class Tally:
    """Bad events and exposure (requests, sessions or tool calls) on both pools over a stretch."""

    canary_events: float
    canary_exposure: float
    stable_events: float
    stable_exposure: float

    @property
    def events(self) -> float:
        """Bad events on both pools."""
        return self.canary_events + self.stable_events

    @property
    def share(self) -> float | None:
        """The canary's share of exposure, or None when there was none on one pool."""
        total = self.canary_exposure + self.stable_exposure
        if self.canary_exposure <= 0 or self.stable_exposure <= 0:
            return None
        return self.canary_exposure / total

    def minus(self, earlier: Tally) -> Tally:
        """The counts between ``earlier`` (cumulative) and this (cumulative)."""
        return Tally(
            self.canary_events - earlier.canary_events,
            self.canary_exposure - earlier.canary_exposure,
            self.stable_events - earlier.stable_events,
            self.stable_exposure - earlier.stable_exposure,
        )


ZERO = Tally(0.0, 0.0, 0.0, 0.0)


def total(blocks: Sequence[Tally]) -> Tally:
    """The blocks of a step added up."""
    return Tally(
        sum(b.canary_events for b in blocks),
        sum(b.canary_exposure for b in blocks),
        sum(b.stable_events for b in blocks),
        sum(b.stable_exposure for b in blocks),
    )


def block_count(seconds: float, shortest: float) -> int:
    """How many blocks a step window of ``seconds`` is cut into, none shorter than
    ``shortest`` (a block should hold whole sessions) and at most :data:`MAX_BLOCKS`."""
    if shortest <= 0:
        raise ValueError(f"the shortest block must be longer than 0s, not {shortest!r}")
    return max(1, min(MAX_BLOCKS, math.floor(seconds / shortest)))


def blocks_from_cuts(cuts: Sequence[Tally | None], whole: Tally) -> list[Tally]:
    """Consecutive blocks from cumulative counts at each cut and over the whole window.

    A cut that could not be measured (None: a scrape gap then), or that reads less than the
    cut before it or more than the whole (``increase()`` extrapolates at the window's
    edges), is dropped, merging its two blocks.
    """
    blocks, previous = [], ZERO
    for cut in cuts:
        if cut is None or not (_at_most(previous, cut) and _at_most(cut, whole)):
            continue
        blocks.append(cut.minus(previous))
        previous = cut
    blocks.append(whole.minus(previous))
    return blocks


#: The weight of the neighbouring blocks' covariance (Bartlett's, for one lag: the estimate
#: cannot go negative).
LAG_WEIGHT = 0.5
#: The estimate is noisy and, when a few sessions carry most events, biased low, so the
#: tests divide by upper confidence bounds on the dispersion: the every-tick test (which
#: looks hundreds of times) at this confidence (at 0.9 it spent twice its share of alpha
#: on sessions at ICC 0.1 in ``bench/gate_statistics.py``)...
BOUND_CONFIDENCE = 0.95
#: ...and no evidence before the blocks give this many degrees of freedom;
MIN_DF = 2.0
#: the final look (once) at this one (at 0.6 it spent 5.2% where its share is 4%).
FINAL_CONFIDENCE = 0.8


SPLIT = "Pearson over blocks with a lag-one term, one fitted rate ratio"
HISTORY = (
    "Pearson of the one pool with events over its own blocks, with a lag-one term "
    "(every event lay on that pool)"
)


@dataclass(frozen=True)
class Dispersion:
    """How much more the canary's share of events varies than independent events would."""

    pearson: float
    """Pearson's statistic over the blocks, with the lag-one term."""
    df: float
    """Its expectation when ``phi`` is 1 (blocks less one, less what the lag-one term takes)."""
    blocks: int
    known: float | None = None
    """A dispersion known beforehand (1 for events counted once per session): not estimated."""
    method: str = SPLIT
    """How it was estimated: :data:`SPLIT` or :data:`HISTORY`."""

    @property
    def estimate(self) -> float | None:
        """``pearson / df``; None without degrees of freedom or when ``known``."""
        if self.known is not None or self.df <= 0:
            return None
        return max(0.0, self.pearson) / self.df

    @property
    def phi(self) -> float:
        """What the final look divides its variance by: an upper bound at
        :data:`FINAL_CONFIDENCE`, never below 1; 1 without any degree of freedom."""
        if self.known is not None:
            return self.known
        if self.df < 1:
            return 1.0
        return self.upper(FINAL_CONFIDENCE)

    @property
    def bound(self) -> float:
        """What the every-tick test divides its evidence by: an upper bound at
        :data:`BOUND_CONFIDENCE`, never below 1; infinite (no evidence) below
        :data:`MIN_DF` degrees of freedom."""
        if self.known is not None:
            return self.known
        if self.df < MIN_DF:
            return math.inf
        return self.upper(BOUND_CONFIDENCE)

    def upper(self, confidence: float) -> float:
        """``pearson`` over the lower ``1 - confidence`` quantile of chi-square on ``df``
        (an upper confidence bound on ``phi`` were the blocks normal), at least 1."""
        if self.df <= 0:
            return math.inf
        return max(1.0, max(0.0, self.pearson) / _chi2_quantile(1.0 - confidence, self.df))

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for a gate's evidence."""
        if self.known is not None:
            return {"method": "known, not estimated", "phi": self.known, "blocks": self.blocks}
        estimate, bound = self.estimate, self.bound
        return {
            "method": self.method,
            "phi": round(self.phi, 6),
            "estimate": None if estimate is None else round(estimate, 6),
            "bound": None if math.isinf(bound) else round(bound, 6),
            "bound_confidence": BOUND_CONFIDENCE,
            "final_confidence": FINAL_CONFIDENCE,
            "df": round(self.df, 3),
            "blocks": self.blocks,
        }


def estimate_dispersion(
    steps: Sequence[Sequence[Tally]], *, known: float | None = None
) -> Dispersion:
    """The dispersion of the canary's share of events across the blocks of ``steps``.

    Each block's expected canary count is ``n theta_b`` with ``theta_b`` the share at its
    own canary share ``rho_b`` under one rate ratio fitted to all blocks (so a regression,
    however large, is not mistaken for dispersion). Pearson residuals use the hypergeometric
    variance ``v_b`` of the block's two-by-two table; the lag-one term adds twice the
    products of neighbouring residuals within a step. With independent events each residual
    has variance ``1 - v_b / V`` and neighbours covariance ``-sqrt(v_b v_c) / V`` (the fit
    takes one direction), so ``df`` is the sum of those: Pearson / df is unbiased for ``phi``.

    When every event lies on one pool (a clean canary beside a noisy stable, or a canary
    failing beside a silent stable) no finite ratio fits, and the split says nothing about
    clustering. Then the pool that has the events is asked instead: how its own events
    spread over the blocks against its own exposure (:func:`history_dispersion`). With
    ``known``, nothing is estimated.
    """
    usable = [[b for b in blocks if _informative(b)] for blocks in steps]
    count = sum(len(blocks) for blocks in usable)
    if known is not None:
        return Dispersion(0.0, 0.0, count, known)
    ratio = fitted_ratio([b for blocks in usable for b in blocks])
    if ratio is None:
        return history_dispersion(steps)
    if count < 2:
        return Dispersion(0.0, 0.0, count)
    pearson = 0.0
    neighbours = 0.0
    weight = 0.0
    for blocks in usable:
        residuals = []
        variances = []
        for block in blocks:
            theta = _theta(_share(block), ratio)
            variance = _variance(block, theta)
            variances.append(variance)
            residuals.append((block.canary_events - block.events * theta) / math.sqrt(variance))
        weight += sum(variances)
        pearson += sum(r * r for r in residuals)
        pearson += 2.0 * LAG_WEIGHT * sum(a * b for a, b in itertools.pairwise(residuals))
        neighbours += LAG_WEIGHT * sum(math.sqrt(a * b) for a, b in itertools.pairwise(variances))
    df = count - 1 - 2.0 * neighbours / weight
    return Dispersion(pearson, df, count)


def history_dispersion(steps: Sequence[Sequence[Tally]]) -> Dispersion:
    """The dispersion of one pool's own events across the blocks of each step, for when all
    events lie on that pool.

    Within a step, a pool's ``K`` events fall into its blocks in proportion to its exposure
    ``p_b`` if they are independent and its rate is constant: Pearson's
    ``sum (k_b - K p_b)^2 / (K p_b)`` then has expectation ``B - 1``, and ``phi (B - 1)``
    when events come ``phi`` to a cluster. The lag-one term is the same as the split's, and
    a multinomial's neighbours have covariance ``-sqrt(p_b p_c)``, which sets ``df``. A rate
    that moves with load over the step reads as dispersion here, so this estimate errs
    high (less evidence, never more). Both pools are asked; only one has events.
    """
    pearson = df = 0.0
    blocks_used = 0
    for blocks in steps:
        for pool in ("canary", "stable"):
            counts = [
                (b.canary_events, b.canary_exposure)
                if pool == "canary"
                else (b.stable_events, b.stable_exposure)
                for b in blocks
            ]
            counts = [(k, e) for k, e in counts if e > 0]
            events = sum(k for k, _ in counts)
            exposure = sum(e for _, e in counts)
            if events <= 0 or len(counts) < 2:
                continue
            shares = [e / exposure for _, e in counts]
            residuals = [
                (k - events * p) / math.sqrt(events * p)
                for (k, _), p in zip(counts, shares, strict=True)
            ]
            pearson += sum(r * r for r in residuals)
            pearson += 2.0 * LAG_WEIGHT * sum(a * b for a, b in itertools.pairwise(residuals))
            df += len(counts) - 1
            df -= 2.0 * LAG_WEIGHT * sum(math.sqrt(a * b) for a, b in itertools.pairwise(shares))
            blocks_used += len(counts)
    return Dispersion(pearson, df, blocks_used, method=HISTORY)


def fitted_ratio(blocks: Sequence[Tally]) -> float | None:
    """The rate ratio whose expected canary events over ``blocks`` match the observed ones.

    None when all or none of the events are on the canary (no finite positive ratio).
    """
    observed = sum(b.canary_events for b in blocks)
    events = sum(b.events for b in blocks)
    if observed <= 0 or observed >= events:
        return None
    weighted = [(b.events, _share(b)) for b in blocks if b.events > 0]
    # Newton's method on log r, kept inside a bracket that halves when a step leaves it:
    # the expected count rises monotonically from 0 to all events as log r runs over R.
    low, high, x = -50.0, 50.0, 0.0
    for _ in range(200):
        r = math.exp(x)
        thetas = [(n, _theta(rho, r)) for n, rho in weighted]
        gap = sum(n * t for n, t in thetas) - observed
        if abs(gap) < 1e-9 * max(1.0, observed):
            break
        low, high = (x, high) if gap < 0 else (low, x)
        slope = sum(n * t * (1.0 - t) for n, t in thetas)
        step = x - gap / slope if slope > 0 else math.nan
        x = step if low < step < high else (low + high) / 2
    return math.exp(x)


@dataclass(frozen=True)
class StratifiedLook:
    """The final look: a stratified (Cochran-Mantel-Haenszel) test over every block."""

    statistic: float
    critical: float
    alpha: float
    reject: bool
    observed: float
    expected: float
    variance: float
    dispersion: Dispersion
    strata: int
    canary_rate: float | None
    stable_rate: float | None

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for the gate's evidence."""
        return {
            "method": "Cochran-Mantel-Haenszel over the steps' blocks, one-sided, "
            "variance x dispersion, once at the horizon",
            "z": round(self.statistic, 6),
            "critical_z": round(self.critical, 6),
            "alpha": self.alpha,
            "reject": self.reject,
            "canary_events": self.observed,
            "expected_canary_events": round(self.expected, 6),
            "strata": self.strata,
            "dispersion": self.dispersion.as_evidence(),
            "canary_rate": self.canary_rate,
            "stable_rate": self.stable_rate,
        }


def stratified_test(
    steps: Sequence[Sequence[Tally]], *, alpha: float, dispersion: Dispersion | None = None
) -> StratifiedLook:
    """One-sided test of "the canary's rate is above stable's" over blocks as strata.

    ``z = sum_b (k_b - n_b rho_b) / sqrt(phi * sum_b v_b)`` with ``v_b`` the block's
    hypergeometric variance; with ``phi`` estimated from ``df`` degrees of freedom the
    critical value is Student's t on ``df`` (quasi-likelihood), else the normal one.

    :raises ValueError: a bad ``alpha``, or no block with exposure on both pools.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, not {alpha!r}")
    blocks = [b for step in steps for b in step if b.share is not None]
    if not blocks:
        raise ValueError("no block with traffic on both pools: nothing to compare")
    dispersion = dispersion if dispersion is not None else estimate_dispersion(steps)
    observed = sum(b.canary_events for b in blocks)
    expected = sum(b.events * _share(b) for b in blocks)
    variance = sum(_variance(b, _share(b)) for b in blocks)
    statistic = 0.0
    if variance > 0:
        statistic = (observed - expected) / math.sqrt(dispersion.phi * variance)
    if dispersion.known is None and dispersion.phi > 1.0 and dispersion.df >= 1:
        # The variance rests on an estimate from df degrees of freedom: Student's t, as in
        # quasi-likelihood. At 1 the estimate is not used, and the variance is binomial.
        critical = student_t_quantile(1.0 - alpha, dispersion.df)
    else:
        critical = NormalDist().inv_cdf(1.0 - alpha)
    whole = total(blocks)
    return StratifiedLook(
        statistic=statistic,
        critical=critical,
        alpha=alpha,
        reject=statistic > critical,
        observed=observed,
        expected=expected,
        variance=variance,
        dispersion=dispersion,
        strata=len(blocks),
        canary_rate=_rate(whole.canary_events, whole.canary_exposure),
        stable_rate=_rate(whole.stable_events, whole.stable_exposure),
    )


def _at_most(low: Tally, high: Tally) -> bool:
    return (
        low.canary_events <= high.canary_events
        and low.canary_exposure <= high.canary_exposure
        and low.stable_events <= high.stable_events
        and low.stable_exposure <= high.stable_exposure
    )


def _informative(block: Tally) -> bool:
    return block.share is not None and block.events > 0 and _variance(block, 0.5) > 0


def _share(block: Tally) -> float:
    share = block.share
    assert share is not None
    return share


def _theta(rho: float, ratio: float) -> float:
    return rho * ratio / (rho * ratio + 1.0 - rho)


def _variance(block: Tally, theta: float) -> float:
    """``n theta (1 - theta)``, times ``(T - n) / (T - 1)`` when exposure counts trials."""
    n = block.events
    exposure = block.canary_exposure + block.stable_exposure
    finite = 1.0
    if exposure > 1 and n <= exposure:
        finite = (exposure - n) / (exposure - 1)
    return n * theta * (1.0 - theta) * finite


def _chi2_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of chi-square on ``df`` degrees of freedom (Wilson-Hilferty: within
    about 1% from 2 degrees of freedom on)."""
    z = NormalDist().inv_cdf(p)
    scale = 2.0 / (9.0 * df)
    return df * max(1.0 - scale + z * math.sqrt(scale), 1e-3) ** 3


def _rate(events: float, exposure: float) -> float | None:
    return events / exposure if exposure > 0 else None
