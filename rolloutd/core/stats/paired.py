"""A paired test for continuous per-case scores: is the canary's mean score below the baseline's?

The tool-argument rules pair two runs of the same cases and test only the discordant pairs,
which needs right/wrong outcomes. A reference answer scored by token-F1 or a judge has a
score in [0, 1] per case, so the pairs are differences ``d_i = canary_i - baseline_i`` in
[-1, 1] and the question is their mean.

**The test.** One-sided paired t: H0 "the canary's mean score is at most ``margin`` below
the baseline's" (``mean(d) >= -margin``) against "more than ``margin`` below". With ``n``
pairs, ``t = (mean(d) + margin) / (sd(d) / sqrt(n))`` and the p-value is
``P(T_{n-1} <= t)``.

**What it assumes.** The cases are independent draws from the suite's population, and the
mean of the differences is close enough to normal for the t distribution: a central limit
theorem on bounded differences, which :data:`MIN_PAIRS` keeps from being asked on a handful.
The scores may be discrete (a 1-5 rubric) and most differences may be zero (an unchanged
answer is scored the same, from the judge's cache): zeros shrink ``sd(d)`` and ``n`` alike
and the test stays valid. ``bench/judge_power.py`` measures its false-alarm rate on A/A
pairs and its power by simulation, so the assumption is checked, not trusted.

Numbers in, a verdict out; where the scores come from is the caller's business.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rolloutd.core.stats.sequential import beta_upper_tail

MIN_PAIRS = 20
"""Fewer pairs than this and the t approximation is not trusted: the test is not made."""


@dataclass(frozen=True)
class PairedScores:
    """The paired t test's figures for one pair of runs."""

    pairs: int
    baseline_mean: float
    canary_mean: float
    mean_difference: float
    sd_difference: float
    margin: float
    alpha: float
    statistic: float
    p_value: float
    interval: tuple[float, float]

    @property
    def fires(self) -> bool:
        """Whether the canary is worse by more than ``margin`` at level ``alpha``."""
        return self.pairs >= MIN_PAIRS and self.p_value <= self.alpha

    def as_evidence(self) -> dict[str, object]:
        """JSON-ready figures, in points (hundredths) where they are shares."""
        return {
            "method": "one-sided paired t on per-case score differences (canary - baseline)",
            "pairs": self.pairs,
            "baseline_mean": round(self.baseline_mean, 6),
            "canary_mean": round(self.canary_mean, 6),
            "difference_points": round(100 * self.mean_difference, 3),
            "sd_difference": round(self.sd_difference, 6),
            "margin_points": round(100 * self.margin, 3),
            "alpha": self.alpha,
            "t": round(self.statistic, 4),
            "p_value": self.p_value,
            "difference_interval_points": [round(100 * bound, 3) for bound in self.interval],
            "interval_confidence": 1 - 2 * self.alpha,
            "fires": self.fires,
        }


def paired_score_test(
    baseline: Sequence[float], canary: Sequence[float], *, margin: float, alpha: float
) -> PairedScores:
    """Test "the canary's mean is more than ``margin`` below the baseline's" on paired scores.

    ``baseline[i]`` and ``canary[i]`` are the same case's scores.

    :raises ValueError: the sequences differ in length, a score is not finite, ``margin``
        is negative or ``alpha`` is not in (0, 1).
    """
    if len(baseline) != len(canary):
        raise ValueError(f"{len(baseline)} baseline scores but {len(canary)} canary scores")
    if not 0.0 < alpha < 1.0 or not math.isfinite(margin) or margin < 0.0:
        raise ValueError(f"alpha must be in (0, 1) and margin >= 0, got {alpha} and {margin}")
    if not all(math.isfinite(x) for x in (*baseline, *canary)):
        raise ValueError("every score must be a finite number")
    n = len(baseline)
    if n == 0:
        return PairedScores(0, 0.0, 0.0, 0.0, 0.0, margin, alpha, 0.0, 1.0, (-1.0, 1.0))
    differences = [c - b for b, c in zip(baseline, canary, strict=True)]
    mean = math.fsum(differences) / n
    sd = _sd(differences, mean)
    statistic, p_value = _t_and_p(mean + margin, sd, n)
    interval = _interval(mean, sd, n, alpha)
    return PairedScores(
        n,
        math.fsum(baseline) / n,
        math.fsum(canary) / n,
        mean,
        sd,
        margin,
        alpha,
        statistic,
        p_value,
        interval,
    )


def _sd(values: Sequence[float], mean: float) -> float:
    if len(values) < 2:
        return 0.0
    return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1))


def _t_and_p(shifted: float, sd: float, n: int) -> tuple[float, float]:
    if n < 2:
        return 0.0, 1.0
    if sd == 0.0:
        # Every pair differs by the same amount: no noise to weigh it against.
        if shifted < 0.0:
            return -math.inf, 0.0
        return (math.inf if shifted > 0 else 0.0), 1.0
    statistic = shifted / (sd / math.sqrt(n))
    return statistic, t_lower_tail(statistic, n - 1)


def t_lower_tail(t: float, dof: int) -> float:
    """``P(T <= t)`` for Student's t with ``dof`` degrees of freedom (``dof >= 1``)."""
    if t == 0.0:
        return 0.5
    # P(|T| >= |t|) = I_{dof/(dof+t^2)}(dof/2, 1/2), the regularised incomplete beta.
    x = dof / (dof + t * t)
    tails = 1.0 - beta_upper_tail(dof / 2.0, 0.5, x) if 0.0 < x < 1.0 else float(x >= 1.0)
    return tails / 2.0 if t < 0 else 1.0 - tails / 2.0


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile of Student's t with ``dof`` degrees of freedom (by bisection, to
    well below 1e-12; cached, since a gate asks for the same few)."""
    low, high = -1e3, 1e3
    for _ in range(64):
        middle = (low + high) / 2.0
        if t_lower_tail(middle, dof) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def _interval(mean: float, sd: float, n: int, alpha: float) -> tuple[float, float]:
    # The two-sided 1 - 2 alpha interval of canary minus baseline: its lower end is the
    # one-sided bound the test compares with -margin.
    if n < 2:
        return (-1.0, 1.0)
    half = t_quantile(1.0 - alpha, n - 1) * sd / math.sqrt(n)
    return (max(-1.0, mean - half), min(1.0, mean + half))
