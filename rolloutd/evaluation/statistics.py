"""Paired tests for the suite: the same cases on both builds, judged on the discordant pairs.

One 300-case run has a standard error of about 2.2 points, so comparing two exactness
figures as if they were independent samples cannot see a 1-point loss, and a rule such as
"more than 1 point below" on point estimates fires on noise. Both builds answer the same
cases at temperature 0, so the comparison is paired: only the *discordant* cases, right on
one build and wrong on the other, carry information about the difference.

* **No regression** (a field, or the whole call): under H0 "the canary is no worse", of the
  ``m = b + c`` discordant cases the canary is the wrong side (``b``) with probability at
  most 1/2. The exact one-sided binomial (McNemar) p-value is ``P(Bin(m, 1/2) >= b)``. Many
  fields are tested at once, so the per-field p-values are adjusted with Holm's step-down
  method: the chance that *any* field fails on noise stays at alpha.
* **Maximum drop** (a rollback trigger): H0 "the canary's exactness is at most ``margin``
  below the baseline's" against "more than ``margin`` below". With a margin the conditional
  binomial no longer applies; Tango's score statistic for paired proportions (Tango 1998)
  ``Z = (b - c - n*margin) / sqrt(n * (2*q + margin*(1 - margin)))``, with ``q`` the
  maximum-likelihood share of canary-better pairs under H0, orders the outcomes. Its normal
  approximation fires up to 1.8 times alpha at the margin on 300 cases (the counts are small
  and skewed), so the p-value is the exact one: the largest ``P(Z >= z observed)`` over the
  nuisance (the share of canary-better pairs) on the boundary of H0, each summed over every
  outcome (an exact unconditional test, Suissa & Shuster 1985). Its false-alarm rate and
  power on a given number of cases are measured by simulation (:func:`simulate_max_drop`)
  and can be checked against the exact sum over every outcome
  (:func:`max_drop_fire_probability`).

**Across runs.** A rollout judges its suites again and again (daily, and a ``sampled_suite``
beside each run), and each judgement at alpha would add its own chance of a false alarm.
:func:`spent_alpha` gives the ``t``-th run of a rollout ``alpha * 6 / (pi^2 t^2)``, split over
the run's suites: summed over any number of runs it is at most alpha, whatever the runs share
(the same cases rerun are far from independent, which rules out multiplying their evidence).

Intervals for a paired difference invert the same score statistic.
"""

from __future__ import annotations

import functools
import math
import random
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

from rolloutd.core.stats.sequential import beta_upper_tail

_NORMAL = NormalDist()
# The nuisance grid of the exact max-drop test, denser where few pairs flip, then a golden
# section search around its best point: the largest tail to about 0.1%.
_NUISANCE_POINTS = 100
_REFINE_STEPS = 16


@dataclass(frozen=True)
class PairedCounts:
    """Cases measured on both builds, split by which build got each right."""

    both_good: int
    canary_worse: int
    canary_better: int
    both_bad: int

    @property
    def pairs(self) -> int:
        """Cases measured on both builds."""
        return self.both_good + self.canary_worse + self.canary_better + self.both_bad

    @property
    def discordant(self) -> int:
        """Cases right on exactly one build."""
        return self.canary_worse + self.canary_better

    @property
    def drop(self) -> float:
        """Baseline minus canary, as a share of the pairs (positive: the canary is worse)."""
        return (self.canary_worse - self.canary_better) / self.pairs if self.pairs else 0.0

    def as_evidence(self) -> dict[str, int]:
        """The four counts, and the pairs they add up to, as JSON-ready data."""
        return {"pairs": self.pairs, **asdict(self)}


def pair(baseline: Mapping[str, bool], canary: Mapping[str, bool]) -> PairedCounts:
    """Pair two runs' good/bad flags by case id; cases missing from either side are left out."""
    counts = [0, 0, 0, 0]
    for key, base in baseline.items():
        if key not in canary:
            continue
        counts[(not base) * 2 + (not canary[key])] += 1
    both_good, canary_worse, canary_better, both_bad = counts
    return PairedCounts(both_good, canary_worse, canary_better, both_bad)


def worse_p_value(counts: PairedCounts) -> float:
    """Exact one-sided McNemar p-value of "the canary is worse": ``P(Bin(m, 1/2) >= b)``."""
    m, b = counts.discordant, counts.canary_worse
    if m == 0:
        return 1.0
    return math.fsum(math.comb(m, k) for k in range(b, m + 1)) / 2.0**m


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm-adjusted p-values: reject where the adjusted value is below alpha."""
    ordered = sorted(p_values.items(), key=lambda item: (item[1], item[0]))
    adjusted: dict[str, float] = {}
    running = 0.0
    total = len(ordered)
    for rank, (name, p) in enumerate(ordered):
        running = max(running, min(1.0, (total - rank) * p))
        adjusted[name] = running
    return adjusted


def score_statistic(counts: PairedCounts, margin: float) -> float:
    """Tango's score statistic for H0 "drop = margin" (large values: the drop is larger)."""
    n = counts.pairs
    if n == 0:
        return 0.0
    b, c = counts.canary_worse, counts.canary_better
    variance = _score_variance(b, c, n, margin)
    if variance <= 0.0:
        return 0.0
    return (b - c - n * margin) / math.sqrt(variance)


def _score_variance(b: int, c: int, n: int, margin: float) -> float:
    if margin < 0:
        # Symmetric: "canary - baseline = -margin" with the roles of b and c swapped.
        return _score_variance(c, b, n, -margin)
    a = 2.0 * n
    bb = -(b + c) + (2.0 * n - b + c) * margin
    cc = -c * margin * (1.0 - margin)
    q = (-bb + math.sqrt(max(bb * bb - 4.0 * a * cc, 0.0))) / (2.0 * a)
    return n * (2.0 * q + margin * (1.0 - margin))


def drop_interval(counts: PairedCounts, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided score interval for the drop (baseline minus canary, as a share)."""
    if counts.pairs == 0:
        return (-1.0, 1.0)
    z = _NORMAL.inv_cdf(0.5 + confidence / 2.0)
    lower = _solve(lambda d: score_statistic(counts, d) - z)
    upper = _solve(lambda d: score_statistic(counts, d) + z)
    return (lower, upper)


def _solve(f: Any) -> float:
    # f decreases in the margin; bisection on (-1, 1) to well below a tenth of a point.
    low, high = -0.999999, 0.999999
    if f(low) <= 0:
        return low
    if f(high) >= 0:
        return high
    for _ in range(60):
        middle = (low + high) / 2.0
        if f(middle) > 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


@dataclass(frozen=True)
class DropTest:
    """The max-drop rule's judgement of one pair of runs."""

    counts: PairedCounts
    margin: float
    alpha: float
    statistic: float
    p_value: float
    interval: tuple[float, float]

    @property
    def fires(self) -> bool:
        """Whether the drop is more than ``margin`` at level ``alpha``."""
        return self.p_value <= self.alpha

    def as_evidence(self) -> dict[str, Any]:
        """JSON-ready figures, in points (hundredths) where they are shares."""
        return {
            "method": "Tango score statistic for paired proportions, one-sided, exact "
            "unconditional p-value (largest over the nuisance on the null's boundary)",
            **self.counts.as_evidence(),
            "drop_points": round(100 * self.counts.drop, 3),
            "margin_points": round(100 * self.margin, 3),
            "alpha": self.alpha,
            "z": round(self.statistic, 4),
            "p_value": self.p_value,
            "drop_interval_points": [round(100 * bound, 3) for bound in self.interval],
            "interval_confidence": 1 - 2 * self.alpha,
            "fires": self.fires,
        }


def max_drop_test(counts: PairedCounts, margin: float, alpha: float) -> DropTest:
    """Does the canary lose more than ``margin`` (a share: 0.01 is one point) of exactness?"""
    z = score_statistic(counts, margin)
    p_value = exact_drop_p_value(counts, margin)
    return DropTest(counts, margin, alpha, z, p_value, drop_interval(counts, 1 - 2 * alpha))


def exact_drop_p_value(counts: PairedCounts, margin: float) -> float:
    """The exact p-value of Tango's statistic for "the drop is more than ``margin``".

    ``max over q of P_q(Z >= z observed)``, where under ``q`` a pair is canary-better with
    probability ``q`` and canary-worse with ``q + margin`` (the boundary of H0, where the
    chance of a large ``Z`` is largest), over a grid of ``q`` from 0 to ``(1 - margin)/2``.
    """
    if counts.pairs == 0:
        return 1.0
    statistic = _statistic(counts.canary_worse, counts.canary_better, counts.pairs, margin)
    return _largest_tail(counts.pairs, round(margin, 12), round(statistic, 12))


@functools.lru_cache(maxsize=256)
def exact_critical_z(cases: int, margin: float, alpha: float) -> float:
    """The smallest value of Tango's statistic on ``cases`` pairs whose exact p-value is at
    most ``alpha``: the rule fires exactly when ``Z`` reaches it (inf: it never can)."""
    attained = sorted(
        {
            round(_statistic(b, c, cases, margin), 12)
            for b in range(cases + 1)
            for c in range(cases - b + 1)
            if b - c > cases * margin
        }
    )
    low, high = 0, len(attained)
    while low < high:
        middle = (low + high) // 2
        if _largest_tail(cases, round(margin, 12), attained[middle]) <= alpha:
            high = middle
        else:
            low = middle + 1
    return attained[low] if low < len(attained) else math.inf


def spent_alpha(alpha: float, run: int, looks: int = 1) -> float:
    """The level the ``run``-th judged run of a rollout (1 for the first) may spend on each
    of its ``looks`` (suites): ``alpha * 6 / (pi^2 run^2) / looks``.

    Summed over every run, however many, it is at most ``alpha``: a union bound, valid
    however much the runs share (the same cases, the same shadow baseline).

    :raises ValueError: ``run`` or ``looks`` below 1.
    """
    if run < 1 or looks < 1:
        raise ValueError(f"run ({run}) and looks ({looks}) count from 1")
    return alpha * 6.0 / (math.pi**2 * run * run) / looks


def spending_evidence(alpha: float, run: int, looks: int = 1) -> dict[str, object]:
    """How :func:`spent_alpha` split the gate's ``alpha`` for this run, for its evidence."""
    return {
        "gate_alpha": alpha,
        "run": run,
        "looks": looks,
        "schedule": "gate alpha x 6 / (pi^2 run^2) / looks",
    }


def _fires(b: int, c: int, n: int, margin: float, z_crit: float) -> bool:
    return b - c > n * margin and _statistic(b, c, n, margin) >= z_crit


def _statistic(b: int, c: int, n: int, margin: float) -> float:
    variance = _score_variance(b, c, n, margin)
    if variance <= 0.0:
        return 0.0
    return (b - c - n * margin) / math.sqrt(variance)


@functools.lru_cache(maxsize=4096)
def _largest_tail(n: int, margin: float, z: float) -> float:
    """``max over q of P_q(Z >= z)`` on the boundary of H0 (see :func:`exact_drop_p_value`)."""
    region = _region(n, margin, z)
    if all(c < 0 for c in region):
        return 0.0
    top = (1.0 - margin) / 2.0
    last = _NUISANCE_POINTS - 1
    grid = [top * (i / last) ** 2 for i in range(_NUISANCE_POINTS)]
    tails = [_tail(n, margin, q, region) for q in grid]
    best = max(range(len(grid)), key=tails.__getitem__)
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, last)]
    largest = tails[best]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(_REFINE_STEPS):
        left, right = high - ratio * (high - low), low + ratio * (high - low)
        at_left, at_right = _tail(n, margin, left, region), _tail(n, margin, right, region)
        largest = max(largest, at_left, at_right)
        low, high = (low, right) if at_left >= at_right else (left, high)
    return min(1.0, largest)


def _region(n: int, margin: float, z: float) -> list[int]:
    """For each count ``b`` of canary-worse pairs, the most canary-better pairs ``c`` with
    ``Z(b, c) >= z`` (-1: none). ``Z`` falls as ``c`` grows and rises with ``b``, so each is
    a prefix and the prefixes grow with ``b``."""
    region = []
    c = -1
    for b in range(n + 1):
        c = min(c, n - b)
        while c + 1 <= n - b and _statistic(b, c + 1, n, margin) >= z - 1e-9:
            c += 1
        region.append(c)
    return region


def _tail(n: int, margin: float, q: float, region: Sequence[int]) -> float:
    """``P(Z >= z)`` when pairs are canary-worse w.p. ``q + margin``, canary-better w.p. ``q``."""
    worse = min(1.0, q + margin)
    spread = 9.0 * math.sqrt(n * worse * (1.0 - worse)) + 9.0
    low = max(0, math.floor(n * worse - spread))
    high = min(n, math.ceil(n * worse + spread))
    better = q / (1.0 - worse) if worse < 1.0 else 0.0
    total = 0.0
    for b in range(low, high + 1):
        c = region[b]
        if c < 0:
            continue
        total += _pmf(n, worse, b) * _binomial_cdf(c, n - b, better)
    return total


def _binomial_cdf(k: int, n: int, p: float) -> float:
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    if k < 40 and n * p < 40:
        # A short sum by the pmf's recurrence is cheaper than the continued fraction.
        term = math.exp(n * math.log1p(-p))
        if term > 0.0:
            total, ratio = term, p / (1.0 - p)
            for j in range(k):
                term *= (n - j) / (j + 1) * ratio
                total += term
            return min(1.0, total)
    return beta_upper_tail(k + 1, n - k, p)


def simulate_max_drop(
    cases: int,
    *,
    margin: float,
    alpha: float,
    churn: float,
    drop: float,
    runs: int = 4000,
    seed: int = 0,
) -> dict[str, float]:
    """How often the max-drop rule fires, and how often the naive rule would, by simulation.

    Each simulated pair of runs has ``cases`` cases; a case is canary-worse with probability
    ``churn/2 + drop`` and canary-better with probability ``churn/2`` (``churn`` is the
    share of cases whose outcome flips between builds for reasons that cancel out). The
    naive rule fires whenever the observed drop exceeds ``margin``.
    """
    worse, better, better_if_not_worse = _flip_chances(churn, drop)
    if not 0.0 <= better <= 1.0 or not 0.0 <= worse + better <= 1.0:
        raise ValueError(f"churn {churn:g} and drop {drop:g} are not probabilities")
    rng = random.Random(seed)
    z_crit = exact_critical_z(cases, margin, alpha)
    fired = naive = 0
    for _ in range(runs):
        b = _draw(rng, cases, worse)
        c = _draw(rng, cases - b, better_if_not_worse)
        fired += _fires(b, c, cases, margin, z_crit)
        naive += (b - c) > margin * cases
    return {"rule": fired / runs, "naive": naive / runs, "runs": runs}


def max_drop_fire_probability(
    cases: int, *, margin: float, alpha: float, churn: float, drop: float
) -> float:
    """The exact probability that the max-drop rule fires, summed over every (b, c)."""
    worse, _, better_if_not_worse = _flip_chances(churn, drop)
    z_crit = exact_critical_z(cases, margin, alpha)
    total = 0.0
    for b in range(cases + 1):
        p_b = _pmf(cases, worse, b)
        if p_b < 1e-15:
            continue
        rest = cases - b
        for c in range(rest + 1):
            if _fires(b, c, cases, margin, z_crit):
                total += p_b * _pmf(rest, better_if_not_worse, c)
    return total


def _flip_chances(churn: float, drop: float) -> tuple[float, float, float]:
    """A case's chance to be canary-worse (``churn/2 + drop``), canary-better (``churn/2``),
    and canary-better given that it is not worse: how a pair of runs is drawn."""
    worse, better = churn / 2.0 + drop, churn / 2.0
    return worse, better, (better / (1.0 - worse) if worse < 1.0 else 0.0)


@functools.lru_cache(maxsize=64)
def operating_characteristics(
    cases: int,
    margin: float,
    alpha: float,
    churn: float,
    drops: Sequence[float] = (0.0, 0.01, 0.02, 0.03, 0.05),
    runs: int = 2000,
) -> tuple[dict[str, float], ...]:
    """The max-drop rule's firing rate at each true drop, by simulation (seeded, cached)."""
    return tuple(
        {
            "drop_points": round(100 * drop, 3),
            **simulate_max_drop(
                cases, margin=margin, alpha=alpha, churn=churn, drop=drop, runs=runs, seed=1
            ),
        }
        for drop in drops
    )


def _pmf(n: int, p: float, k: int) -> float:
    if p <= 0.0:
        return 1.0 if k == 0 else 0.0
    if p >= 1.0:
        return 1.0 if k == n else 0.0
    log = (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )
    return math.exp(log)


@functools.lru_cache(maxsize=4096)
def _cdf(n: int, p: float) -> tuple[float, ...]:
    total = 0.0
    cumulative = []
    for k in range(n + 1):
        total += _pmf(n, p, k)
        cumulative.append(total)
    return tuple(cumulative)


def _draw(rng: random.Random, n: int, p: float) -> int:
    if n <= 0 or p <= 0.0:
        return 0
    cumulative = _cdf(n, round(p, 12))
    return min(bisect_left(cumulative, rng.random() * cumulative[-1]), n)
