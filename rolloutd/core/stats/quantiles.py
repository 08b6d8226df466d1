"""Latency quantiles from Prometheus histograms: the estimate, anytime bounds, the comparison.

Prometheus gives cumulative bucket counts ``(le, count)``, not samples, so this module says
exactly what it claims from them. The *estimate* is :func:`histogram_quantile`, PromQL's
linear interpolation within a bucket: shown to humans, never used to decide. The *decision*
uses bounds at bucket boundaries, where the empirical CDF is observed exactly, that hold at
every tick at once (confidence sequences), so a gate may re-check them at every tick:

- ``lower``: the quantile is above this bucket bound; ``upper``: it is at or below this one.
- ``method="mixture"`` (default) tracks the one quantile ``q``: at a bound ``b``, the count of
  requests above ``b`` is tested against "a share ``1 - q`` above" with the one-sided
  Beta-binomial mixture of :mod:`rolloutd.core.stats.sequential`. Because counts above ``b``
  only fall as ``b`` grows and the Bayes factor rises with the count, a wrong bound at any
  ``b`` implies a wrong one at the true quantile itself, one Bernoulli(1 - q) stream:
  Ville's inequality covers all bounds and all ticks with no union bound.
- ``method="dkw"`` is the time-uniform Dvoretzky-Kiefer-Wolfowitz band of Howard & Ramdas
  (2022, Bernoulli 28(3), Theorem 2): ``sup_x |F_t(x) - F(x)| <= eps_t`` for all
  ``t >= t_min`` with ``eps_t = A sqrt((log(1 + log(t / t_min)) + C) / t)``, ``A = 0.85``, and
  ``C`` the smallest constant whose error bound from the theorem is ``<= alpha`` (about
  8.12 at alpha = 0.05; the paper's closed form ``0.8 log(1612 / alpha)`` is a little
  larger). It holds for every quantile at once, so it is wider for the one we need.

Assumptions. Requests are independent draws from one distribution per pool over the step
(bursts and per-session correlation make the bounds optimistic). Only bucket boundaries are
claimed: a regression smaller than the bucket spacing near the quantile may never be
detected, and with coarse buckets (vLLM's 2.5 s / 5 s / 10 s) a +20 % p95 shift is invisible
to any bound on the p95 itself (:func:`count_above` still sees more slow requests); the
interpolated estimate assumes a uniform density within the bucket, biased for skewed
latencies. Counts from ``increase()`` may be non-integer
(extrapolation); they are used as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal

from rolloutd.core.stats.sequential import DEFAULT_CONCENTRATION, beta_binomial_log_bf

Bucket = tuple[float, float]
"""One cumulative histogram bucket: (upper bound ``le``, observations at or below it)."""

Method = Literal["mixture", "dkw"]

DKW_A = 0.85
DEFAULT_T_MIN = 100.0


def histogram_quantile(q: float, buckets: Sequence[Bucket]) -> float:
    """PromQL's ``histogram_quantile`` on classic buckets, special cases included.

    Sorts and merges equal bounds, forces the counts monotonic, interpolates linearly within
    the bucket holding rank ``q * total`` (from 0 for the first bucket if its bound is
    positive), and returns the highest finite bound if the rank lands in ``+Inf``. NaN for
    fewer than two buckets, no ``+Inf`` bucket, no observations or ``q`` NaN.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged = _merge(buckets)
    if len(merged) < 2 or merged[-1][0] != math.inf or merged[-1][1] == 0:
        return math.nan
    rank = q * merged[-1][1]
    index = next(i for i, (_, count) in enumerate(merged) if count >= rank or i == len(merged) - 1)
    if index == len(merged) - 1:
        return merged[-2][0]
    if index == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, below = (merged[index - 1][0], merged[index - 1][1]) if index > 0 else (0.0, 0.0)
    end, count = merged[index]
    return start + (end - start) * (rank - below) / (count - below)


@dataclass(frozen=True)
class QuantileBounds:
    """Where the ``q``-quantile of one pool lies, as far as its histogram can tell."""

    q: float
    estimate: float | None
    lower: float | None
    upper: float | None
    samples: float
    alpha: float
    method: str

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for a gate's evidence."""
        return asdict(self)


def quantile_bounds(
    buckets: Sequence[Bucket],
    *,
    q: float = 0.95,
    alpha: float = 0.05,
    method: Method = "mixture",
    t_min: float = DEFAULT_T_MIN,
    concentration: float = DEFAULT_CONCENTRATION,
) -> QuantileBounds:
    """Anytime bounds on the ``q``-quantile at bucket boundaries, each side at level ``alpha``.

    ``lower`` is the largest bound ``b`` with confidence that ``F(b) < q`` (so the quantile
    exceeds ``b``), ``upper`` the smallest with confidence that ``F(b) >= q``; ``None`` where
    the data do not yet support any bound. ``P(ever lower >= quantile) <= alpha`` and
    ``P(ever upper < quantile) <= alpha``.

    :raises ValueError: no ``+Inf`` bucket, negative counts, ``q`` or ``alpha`` out of (0, 1).
    """
    if not (0 < q < 1 and 0 < alpha < 1):
        raise ValueError(f"q and alpha must lie strictly between 0 and 1, not {q!r}, {alpha!r}")
    merged = _merge(buckets)
    if not merged or merged[-1][0] != math.inf:
        raise ValueError("a Prometheus histogram needs its le=+Inf bucket for the total count")
    if any(count < 0 or not math.isfinite(count) for _, count in merged):
        raise ValueError("histogram bucket counts must be finite and >= 0")
    total = merged[-1][1]
    finite = merged[:-1]
    estimate = histogram_quantile(q, merged) if total > 0 else None
    lower = upper = None
    if total > 0 and finite:
        below, above = _tests(total, q, alpha, method, t_min, concentration)
        # ``below`` holds on a prefix of the bounds and ``above`` on a suffix (counts rise).
        first_not_below = _partition(finite, below)
        lower = finite[first_not_below - 1][0] if first_not_below > 0 else None
        first_above = _partition(finite, lambda count: not above(count))
        upper = finite[first_above][0] if first_above < len(finite) else None
    return QuantileBounds(q, estimate, lower, upper, total, alpha, method)


@dataclass(frozen=True)
class LatencyComparison:
    """The canary's quantile against an absolute target and against stable's."""

    canary: QuantileBounds
    stable: QuantileBounds | None
    target_seconds: float | None
    max_ratio: float | None
    slower_than_target: bool
    slower_than_stable: bool

    @property
    def regressed(self) -> bool:
        """Either claim holds: the canary is slower than allowed."""
        return self.slower_than_target or self.slower_than_stable

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for a gate's evidence."""
        return {
            "canary": self.canary.as_evidence(),
            "stable": self.stable.as_evidence() if self.stable else None,
            "target_seconds": self.target_seconds,
            "max_ratio": self.max_ratio,
            "slower_than_target": self.slower_than_target,
            "slower_than_stable": self.slower_than_stable,
        }


def compare_latency(
    canary: Sequence[Bucket],
    stable: Sequence[Bucket] | None = None,
    *,
    target_seconds: float | None = None,
    max_ratio: float | None = None,
    q: float = 0.95,
    alpha: float = 0.05,
    method: Method = "mixture",
    t_min: float = DEFAULT_T_MIN,
) -> LatencyComparison:
    """Is the canary's ``q``-quantile above ``target_seconds``, or above stable's x ``max_ratio``?

    "Slower than target" when the canary's lower bound is ``>= target_seconds``; "slower than
    stable" when it is ``>= max_ratio x`` stable's upper bound (then ``canary quantile >
    lower >= max_ratio x upper >= max_ratio x stable quantile``). With a stable comparison,
    each pool's bound gets ``alpha / 2``, so the chance of any false claim, ever, is at
    most ``alpha``. Neither claim is made from missing data: no bound, no claim.

    :raises ValueError: as :func:`quantile_bounds`, or ``max_ratio`` without stable buckets.
    """
    compare = max_ratio is not None
    if compare and stable is None:
        raise ValueError("max_ratio needs the stable pool's histogram")
    side_alpha = alpha / 2 if compare else alpha
    canary_bounds = quantile_bounds(canary, q=q, alpha=side_alpha, method=method, t_min=t_min)
    stable_bounds = None
    if stable is not None:
        stable_bounds = quantile_bounds(stable, q=q, alpha=side_alpha, method=method, t_min=t_min)
    lower = canary_bounds.lower
    over_target = lower is not None and target_seconds is not None and lower >= target_seconds
    over_stable = (
        compare
        and lower is not None
        and stable_bounds is not None
        and stable_bounds.upper is not None
        and lower >= (max_ratio or 1.0) * stable_bounds.upper
    )
    return LatencyComparison(
        canary_bounds, stable_bounds, target_seconds, max_ratio, over_target, over_stable
    )


def count_above(buckets: Sequence[Bucket], seconds: float) -> tuple[float, float, float]:
    """Requests slower than the first bucket bound at or above ``seconds``, and the total.

    Returns ``(above, total, bound)``. Feed the two pools' ``above`` counts to
    :func:`rolloutd.core.stats.sequential.beta_binomial_test` (rho: the canary's share of
    requests) to test "the canary's share of slow requests is no larger than stable's", the
    SLO form of a latency gate ("95 % of requests under ``seconds``") as an anytime test.

    :raises ValueError: no ``+Inf`` bucket, or no finite bound at or above ``seconds``.
    """
    merged = _merge(buckets)
    if not merged or merged[-1][0] != math.inf:
        raise ValueError("a Prometheus histogram needs its le=+Inf bucket for the total count")
    for le, count in merged[:-1]:
        if le >= seconds:
            return merged[-1][1] - count, merged[-1][1], le
    raise ValueError(f"no finite bucket bound at or above {seconds} s to count slow requests")


def dkw_radius(t: float, alpha: float, *, t_min: float = DEFAULT_T_MIN, a: float = DKW_A) -> float:
    """Howard & Ramdas' time-uniform DKW radius ``eps_t``; infinite before ``t_min``."""
    if t < t_min:
        return math.inf
    return a * math.sqrt((math.log1p(math.log(t / t_min)) + dkw_constant(alpha, a)) / t)


@lru_cache(maxsize=64)
def dkw_constant(alpha: float, a: float = DKW_A) -> float:
    """The smallest ``C`` whose crossing probability bound (Theorem 2) is at most ``alpha``.

    The theorem bounds the crossing probability by ``min over eta`` of
    ``4 exp(-g C) (1 + 1 / ((g - 1) log eta))``, ``g = (2 / eta)(A - sqrt(2 (eta - 1) / C))**2``,
    for ``eta`` in ``(1, eta_max)`` where ``g > 1``. The bound falls as ``C`` grows.
    """
    if not (0 < alpha < 1 and a > 1 / math.sqrt(2)):
        raise ValueError(f"need 0 < alpha < 1 and A > 1/sqrt(2), not {alpha!r}, {a!r}")
    low, high = 1.0, 5.0
    while _dkw_error(high, a) > alpha:
        low, high = high, high * 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if _dkw_error(middle, a) > alpha else (low, middle)
    return high


def _dkw_error(c: float, a: float) -> float:
    def error(eta: float) -> float:
        slack = a - math.sqrt(2 * (eta - 1) / c)
        g = 2 / eta * slack * slack
        if slack <= 0 or g <= 1:
            return math.inf
        return 4 * math.exp(-g * c) * (1 + 1 / ((g - 1) * math.log(eta)))

    # eta_max solves sqrt(eta / 2) + sqrt(2 (eta - 1) / C) = A (where g reaches 1).
    low, high = 1.0, 2 * a * a
    for _ in range(100):
        middle = (low + high) / 2
        grows = math.sqrt(middle / 2) + math.sqrt(2 * (middle - 1) / c) > a
        low, high = (low, middle) if grows else (middle, high)
    # Golden-section search for the minimum over eta in (1, eta_max).
    ratio = (math.sqrt(5) - 1) / 2
    left, right = 1.0, low
    for _ in range(100):
        x1, x2 = right - ratio * (right - left), left + ratio * (right - left)
        left, right = (left, x2) if error(x1) < error(x2) else (x1, right)
    return error((left + right) / 2)


def _tests(
    total: float, q: float, alpha: float, method: Method, t_min: float, concentration: float
) -> tuple[Callable[[float], bool], Callable[[float], bool]]:
    """Two predicates of the count at or below a bound: confident F < q, confident F >= q."""
    if method == "dkw":
        eps = dkw_radius(total, alpha, t_min=t_min)

        def dkw_below(count: float) -> bool:
            return count / total + eps < q

        def dkw_above(count: float) -> bool:
            return count / total - eps >= q

        return dkw_below, dkw_above
    if method != "mixture":
        raise ValueError(f"unknown quantile bound method {method!r}: use 'mixture' or 'dkw'")
    threshold = math.log(1 / alpha)

    def mixture_below(count: float) -> bool:
        # More requests above the bound than a share 1 - q explains: the quantile is above it.
        exceed = total - count
        log_bf = beta_binomial_log_bf(exceed, total, 1 - q, concentration=concentration)
        return log_bf >= threshold

    def mixture_above(count: float) -> bool:
        log_bf = beta_binomial_log_bf(count, total, q, concentration=concentration)
        return log_bf >= threshold

    return mixture_below, mixture_above


def _partition(buckets: Sequence[Bucket], holds: Callable[[float], bool]) -> int:
    """The first index where ``holds(count)`` fails, given it holds on a prefix."""
    low, high = 0, len(buckets)
    while low < high:
        middle = (low + high) // 2
        if holds(buckets[middle][1]):
            low = middle + 1
        else:
            high = middle
    return low


def _merge(buckets: Sequence[Bucket]) -> list[Bucket]:
    """Sorted by bound, equal bounds summed, counts forced monotonic (as PromQL does)."""
    merged: list[Bucket] = []
    for le, count in sorted(buckets, key=lambda bucket: bucket[0]):
        if merged and merged[-1][0] == le:
            merged[-1] = (le, merged[-1][1] + count)
        else:
            merged.append((float(le), float(count)))
    running = -math.inf
    for i, (le, count) in enumerate(merged):
        running = max(running, count)
        merged[i] = (le, running)
    return merged
