"""Anytime-valid tests of "the canary's event rate is no worse than stable's".

A gate re-checks its data at every tick. A fixed threshold polled that way raises false alarms
far above its nominal rate, and a test run once at the end detects late. The tests here are
nonnegative supermartingales under the null hypothesis, so by Ville's inequality
``P(the Bayes factor ever reaches 1/alpha) <= alpha`` however often it is looked at: the gate
may re-test the *cumulative* counts since the step began (``increase(x[<since step start>])``)
at every tick and stop at the first rejection.

Model (Lindon & Malek 2022, "Anytime-valid inference for multinomial count data"). Bad events
(timeouts, schema violations, escalations) on each pool arrive at a rate proportional to the
pool's exposure (requests or sessions). Given that ``n`` events happened, each came from the
canary with probability ``theta = rho*r / (rho*r + 1 - rho)``, where ``rho`` is the canary's
share of exposure and ``r`` the canary/stable rate ratio. The base rate cancels, so load
swings do not matter. H0 "canary no worse" is ``r <= 1``, i.e. ``theta <= rho``.

**One-sided.** The Beta(K*rho, K*(1-rho)) mixture of the reference is two-sided: its Bayes
factor also grows when the canary is *better*. Both tests here mix only over alternatives
where the canary is worse (``theta >= rho``, ``r > 1``). For each such alternative the
likelihood ratio has conditional mean ``<= 1`` whenever the true ``theta <= rho``, so the
mixture is a supermartingale under the whole composite null, and a canary that is better
(``k/n <= rho``) gets ``BF <= 1``: it never rejects. The truncation also adds power: the
Bayes factor is the two-sided one times ``P(theta > rho | data) / P(theta > rho)``, about
twice the two-sided one once the data point to a worse canary.

**rho.** Use the measured share of the rate's denominator on the canary since the step
began, ``canary / (canary + stable)`` (sessions for per-session rates, requests for
per-request rates), not the configured weight: session hashing does not split exactly (400
sessions at weight 5 put 19 on the canary). Exactness assumes rho constant within a step;
a measured rho is an estimate, whose error shrinks like ``1/sqrt(exposure)``, far faster
than the test's own resolution, since exposure counts are much larger than event counts.

**Clusters.** The model takes events as independent. The turns of an agent session share
a pool and a fate, so a session that times out tends to time out again: the canary's count
then varies ``phi`` times as much as a binomial count. ``rate_ratio_test(dispersion=phi)``
divides the log-likelihood ratios by ``phi`` (quasi-likelihood), which keeps the mixture's
mean at one to second order; ``rolloutd.core.stats.stratified`` estimates ``phi``.

**Across steps** (rho changes): :func:`rate_ratio_test` keeps one supermartingale across
steps by mixing over the rate ratio ``r``, which does not change with the weight, with each
step's events judged under that step's rho. Alternatively restart :func:`beta_binomial_test`
at each step with ``alpha / number_of_steps`` (a union bound; valid, less powerful).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

#: Concentration of the Beta mixture: tuned (like a normal mixture) for decisions after
#: roughly 6*K events at alpha = 0.05; K = 100 suits a few hundred to a few thousand.
DEFAULT_CONCENTRATION = 100.0

# The rate-ratio mixture: a half-normal prior on log r, on a grid. A discrete prior is
# exactly valid (a finite mixture of supermartingales), so the grid is no approximation.
_LOG_RATIO_STEP = 0.1
_LOG_RATIO_MAX = 3.5  # r up to ~33
DEFAULT_PRIOR_SCALE = 1.0  # sd of log r: most mass on regressions from +10% to x5

_CF_EPS = 1e-15
_CF_TINY = 1e-300
_CF_MAX_ITER = 100_000


@dataclass(frozen=True)
class SequentialResult:
    """One evaluation of a sequential test: the evidence a gate stores with its verdict."""

    log_bf: float
    bf: float
    alpha: float
    reject: bool
    canary_events: float
    total_events: float
    expected_share: float
    observed_share: float | None
    method: str
    dispersion: float = 1.0

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for the gate's evidence (no infinities, no NaN)."""
        return {
            "method": self.method,
            "dispersion": self.dispersion if math.isfinite(self.dispersion) else None,
            "log_bf": round(self.log_bf, 6),
            "bf": self.bf if math.isfinite(self.bf) else None,
            "threshold": 1.0 / self.alpha,
            "alpha": self.alpha,
            "reject": self.reject,
            "canary_events": self.canary_events,
            "total_events": self.total_events,
            "expected_canary_share": self.expected_share,
            "observed_canary_share": self.observed_share,
        }


@dataclass(frozen=True)
class Segment:
    """Event counts of one step, during which the canary's exposure share was ``rho``."""

    canary_events: float
    stable_events: float
    rho: float


def traffic_share(canary: float, stable: float) -> float:
    """The canary's share of exposure, ``canary / (canary + stable)``.

    :raises ValueError: no exposure at all, or a negative or non-finite count.
    """
    _check_count(canary, "canary exposure")
    _check_count(stable, "stable exposure")
    if canary + stable <= 0:
        raise ValueError("no traffic on either pool: the canary's share is undefined")
    return canary / (canary + stable)


@dataclass(frozen=True)
class FinalLook:
    """The one fixed-horizon test a compare gate makes at the end of its last step."""

    z: float
    critical: float
    alpha: float
    reject: bool
    canary_rate: float
    stable_rate: float

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for the gate's evidence."""
        return {
            "method": "two-proportion z test, one-sided, once at the horizon",
            "z": round(self.z, 6),
            "critical_z": round(self.critical, 6),
            "alpha": self.alpha,
            "reject": self.reject,
            "canary_rate": self.canary_rate,
            "stable_rate": self.stable_rate,
        }


def two_proportion_test(
    canary_events: float,
    canary_exposure: float,
    stable_events: float,
    stable_exposure: float,
    *,
    alpha: float,
) -> FinalLook:
    """One-sided pooled two-proportion z test of "canary rate > stable rate", for one look.

    It is valid only when made once on data fixed in advance (the whole horizon), which is
    how a compare gate uses it: the sequential test above catches large regressions early,
    and this single test at the end has the power a small one needs (Kayenta's strength),
    the two sharing alpha by a union bound.

    :raises ValueError: no exposure on a pool, events above exposure, or a bad ``alpha``.
    """
    _check_alpha(alpha)
    for value, what in (
        (canary_events, "canary events"),
        (canary_exposure, "canary exposure"),
        (stable_events, "stable events"),
        (stable_exposure, "stable exposure"),
    ):
        _check_count(value, what)
    if canary_exposure <= 0 or stable_exposure <= 0:
        raise ValueError("a pool has no exposure: the final look needs traffic on both")
    if canary_events > canary_exposure or stable_events > stable_exposure:
        raise ValueError("more events than exposure: the signal's samples do not count them")
    p_c, p_s = canary_events / canary_exposure, stable_events / stable_exposure
    pooled = (canary_events + stable_events) / (canary_exposure + stable_exposure)
    critical = NormalDist().inv_cdf(1.0 - alpha)
    if pooled in (0.0, 1.0):
        z = 0.0
    else:
        spread = pooled * (1.0 - pooled) * (1.0 / canary_exposure + 1.0 / stable_exposure)
        z = (p_c - p_s) / math.sqrt(spread)
    return FinalLook(z, critical, alpha, z > critical, p_c, p_s)


def beta_binomial_test(
    canary_events: float,
    stable_events: float,
    rho: float,
    *,
    alpha: float = 0.05,
    concentration: float = DEFAULT_CONCENTRATION,
) -> SequentialResult:
    """Test "canary rate <= stable rate" on the events of one step (constant ``rho``).

    ``log BF = log B(a+k, b+n-k) - log B(a, b) - k log rho - (n-k) log(1-rho)
    + log P(theta > rho | a+k, b+n-k) - log P(theta > rho | a, b)`` with
    ``a = K rho``, ``b = K (1 - rho)``: the reference's mixture restricted to
    ``theta > rho``. Reject when ``BF >= 1/alpha``. With no events the BF is 1.

    :raises ValueError: ``rho`` not strictly between 0 and 1 (the canary gets no traffic,
        or there is no stable to compare against), negative counts, or a bad ``alpha``.
    """
    _check_alpha(alpha)
    k, n = _check_events(canary_events, stable_events)
    log_bf = beta_binomial_log_bf(k, n, rho, concentration=concentration)
    return _result(log_bf, alpha, k, n, rho, "beta-binomial mixture, one-sided")


def beta_binomial_log_bf(
    k: float,
    n: float,
    rho: float,
    *,
    concentration: float = DEFAULT_CONCENTRATION,
    one_sided: bool = True,
) -> float:
    """Log Bayes factor of ``k`` canary events among ``n`` against "each is canary w.p. rho".

    ``one_sided=False`` gives the reference's two-sided mixture (for comparison only).

    :raises ValueError: ``rho`` outside (0, 1), ``k`` outside [0, n], or ``concentration <= 0``.
    """
    _check_rho(rho)
    if not 0 <= k <= n:
        raise ValueError(f"canary events {k} must lie between 0 and the total {n}")
    if not concentration > 0:
        raise ValueError(f"concentration must be positive, not {concentration}")
    a, b = concentration * rho, concentration * (1 - rho)
    log_bf = (
        _log_beta(a + k, b + n - k)
        - _log_beta(a, b)
        - k * math.log(rho)
        - (n - k) * math.log1p(-rho)
    )
    if one_sided:
        log_bf += _log_upper_tail(a + k, b + n - k, rho) - _log_upper_tail(a, b, rho)
    return log_bf


def rate_ratio_test(
    segments: Sequence[Segment],
    *,
    alpha: float = 0.05,
    prior_scale: float = DEFAULT_PRIOR_SCALE,
    dispersion: float = 1.0,
) -> SequentialResult:
    """Test "canary rate <= stable rate" across steps whose canary share ``rho`` differs.

    For a rate ratio ``r``, the ``n_j`` events of step ``j`` (``k_j`` on the canary) have
    likelihood ratio ``r**k_j / (1 + rho_j (r - 1))**n_j`` against ``r = 1``. The Bayes factor
    mixes these products over ``r > 1`` with a half-normal prior on ``log r`` (scale
    ``prior_scale``) on a grid. Valid while each step's rho is the share in force when its
    events happened: every term is a supermartingale under ``r <= 1``, and so is the mixture.

    ``dispersion`` (``phi >= 1``) raises each likelihood ratio to the power ``1/phi``, as if
    ``k/phi`` of ``n/phi`` events had been seen: the quasi-likelihood for events that come in
    clusters (the turns of one session), whose count varies ``phi`` times as much as
    independent events do. The product of the tempered ratios keeps mean one to second order
    when ``phi`` is the clusters' ``E[size^2] / E[size]`` (see ``rolloutd.core.stats.stratified``).

    :raises ValueError: no segment, a ``rho`` outside (0, 1), negative counts, or
        ``dispersion < 1``.
    """
    _check_alpha(alpha)
    if not segments:
        raise ValueError("rate_ratio_test needs at least one segment")
    if not prior_scale > 0:
        raise ValueError(f"prior_scale must be positive, not {prior_scale}")
    if not dispersion >= 1:
        raise ValueError(f"dispersion must be a number >= 1 (inf: no evidence), not {dispersion!r}")
    checked = []
    for segment in segments:
        _check_rho(segment.rho)
        k, n = _check_events(segment.canary_events, segment.stable_events)
        checked.append((k, n, segment.rho))
    k_total = sum(k for k, _, _ in checked)
    n_total = sum(n for _, n, _ in checked)
    expected = sum(n * rho for _, n, rho in checked) / n_total if n_total else checked[-1][2]
    log_ratios, ratios_minus_1, log_weights = _ratio_grid(prior_scale)
    scale = 1.0 / dispersion
    terms = [w + scale * k_total * x for x, w in zip(log_ratios, log_weights, strict=True)]
    log1p = math.log1p
    for _, n, rho in checked:
        if n > 0:
            m = scale * n
            terms = [t - m * log1p(rho * y) for t, y in zip(terms, ratios_minus_1, strict=True)]
    log_bf = _log_sum_exp(terms)
    method = "rate-ratio mixture, one-sided"
    if math.isinf(dispersion):
        method += ", no evidence yet (dispersion unknown)"
    elif dispersion > 1:
        method += f", evidence / dispersion {dispersion:.3g}"
    return _result(log_bf, alpha, k_total, n_total, expected, method, dispersion)


@functools.lru_cache(maxsize=1024)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (``1/2 < p < 1``) of Student's t with ``df`` degrees of freedom.

    :raises ValueError: ``p`` outside (1/2, 1) or ``df`` not positive.
    """
    if not 0.5 < p < 1:
        raise ValueError(f"p must lie strictly between 1/2 and 1, not {p!r}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, not {df!r}")
    tail = 1.0 - p
    low, high = 0.0, NormalDist().inv_cdf(p)
    while student_t_upper_tail(high, df) > tail:
        low, high = high, 2 * high
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_upper_tail(middle, df) > tail else (low, middle)
    return (low + high) / 2


def student_t_upper_tail(t: float, df: float) -> float:
    """``P(T > t)`` for ``t >= 0``: ``I_{t^2/(df+t^2)}`` of Beta(1/2, df/2), halved."""
    if t <= 0:
        return 0.5
    x = t * t / (df + t * t)
    return 0.5 * math.exp(_log_upper_tail(0.5, df / 2, x))


def _result(
    log_bf: float,
    alpha: float,
    k: float,
    n: float,
    expected: float,
    method: str,
    dispersion: float = 1.0,
) -> SequentialResult:
    bf = math.exp(log_bf) if log_bf < 700 else math.inf
    return SequentialResult(
        log_bf=log_bf,
        bf=bf,
        alpha=alpha,
        # Anything else (n == 0, or a canary at or below its share) is no evidence at all.
        reject=log_bf >= math.log(1.0 / alpha),
        canary_events=k,
        total_events=n,
        expected_share=expected,
        observed_share=k / n if n > 0 else None,
        method=method,
        dispersion=dispersion,
    )


_Grid = tuple[list[float], list[float], list[float]]
_GRID_CACHE: dict[float, _Grid] = {}


def _ratio_grid(scale: float) -> _Grid:
    """log r, r - 1 and the log prior weight at each grid point; the weights sum to one."""
    grid = _GRID_CACHE.get(scale)
    if grid is None:
        count = round(_LOG_RATIO_MAX / _LOG_RATIO_STEP)
        log_ratios = [m * _LOG_RATIO_STEP for m in range(1, count + 1)]
        raw = [-(x * x) / (2 * scale * scale) for x in log_ratios]
        norm = _log_sum_exp(raw)
        grid = (log_ratios, [math.expm1(x) for x in log_ratios], [w - norm for w in raw])
        _GRID_CACHE[scale] = grid
    return grid


def _log_sum_exp(values: Sequence[float]) -> float:
    top = max(values)
    exp = math.exp
    return top + math.log(sum([exp(v - top) for v in values]))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def beta_upper_tail(a: float, b: float, x: float) -> float:
    """``P(theta > x)`` for ``theta ~ Beta(a, b)`` (``a, b > 0``, ``0 < x < 1``).

    Also the binomial distribution function: ``P(Bin(n, p) <= k) = beta_upper_tail(k + 1,
    n - k, p)`` for ``k < n``.
    """
    return math.exp(_log_upper_tail(a, b, x))


def _log_upper_tail(a: float, b: float, x: float) -> float:
    """``log P(theta > x)`` for ``theta ~ Beta(a, b)``, accurate far into either tail."""
    if x < (a + 1) / (a + b + 2):
        return math.log1p(-math.exp(_log_lower_tail_cf(a, b, x)))
    # P(theta > x) = P(1 - theta < 1 - x), and 1 - theta ~ Beta(b, a).
    return _log_lower_tail_cf(b, a, 1 - x)


def _log_lower_tail_cf(a: float, b: float, x: float) -> float:
    """``log I_x(a, b)`` by its continued fraction (modified Lentz); needs x < (a+1)/(a+b+2)."""
    front = a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b) - math.log(a)
    tiny = _CF_TINY
    apb = a + b
    c = 1.0
    d = 1.0 - apb * x / (a + 1.0)
    d = 1.0 / d if not -tiny < d < tiny else 1.0 / tiny
    h = d
    for m in range(1, _CF_MAX_ITER):
        a2m = a + 2.0 * m
        # Even step of the continued fraction.
        coefficient = m * (b - m) * x / ((a2m - 1.0) * a2m)
        d = 1.0 + coefficient * d
        d = 1.0 / d if not -tiny < d < tiny else 1.0 / tiny
        c = 1.0 + coefficient / c
        if -tiny < c < tiny:
            c = tiny
        h *= d * c
        # Odd step.
        coefficient = -(a + m) * (apb + m) * x / (a2m * (a2m + 1.0))
        d = 1.0 + coefficient * d
        d = 1.0 / d if not -tiny < d < tiny else 1.0 / tiny
        c = 1.0 + coefficient / c
        if -tiny < c < tiny:
            c = tiny
        delta = d * c
        h *= delta
        if -_CF_EPS < delta - 1.0 < _CF_EPS:
            return front + math.log(h)
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def _check_events(canary: float, stable: float) -> tuple[float, float]:
    _check_count(canary, "canary events")
    _check_count(stable, "stable events")
    return float(canary), float(canary) + float(stable)


def _check_count(value: float, what: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{what} must be a finite count >= 0, not {value!r}")


def _check_rho(rho: float) -> None:
    if not (math.isfinite(rho) and 0 < rho < 1):
        raise ValueError(
            f"the canary's share rho={rho!r} must lie strictly between 0 and 1: at 0 the "
            "canary gets no traffic, at 1 there is no stable pool to compare against"
        )


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, not {alpha!r}")
