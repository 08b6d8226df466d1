"""False alarms and detection delay of canary gates, on simulated rollouts (pure Python, seeded).

Issue #6 asks rolloutd's gates to hold the false-alarm rate at alpha while checked at every
tick, and to detect at least as fast as a test run once at a fixed horizon. This measures
that, against the two designs it replaces, on the same simulated traffic:

- ``threshold``: the canary's cumulative rate (or interpolated p95) polled every tick against
  a fixed threshold once 100 canary sessions are in, alarming at the first breach (Flagger /
  Argo style; cumulative since the start, which is kinder to it than their 1-5 min windows).
- ``fixed horizon``: one one-sided test at the end of the horizon, alpha = 0.05 (Kayenta
  style): two-proportion z for rates, Mann-Whitney with tie correction on the bucketed
  latencies. Its delay is the horizon.
- rolloutd, checked every tick at alpha = 0.05: for rates the compare gate as plans get it
  (the rate-ratio mixture across steps at 20% of alpha, plus one final look, the z test at
  80% of alpha, when the last step has baked), and, for comparison, the rate-ratio mixture
  alone at alpha and the Beta-binomial mixture restarted per step at alpha / 2; for latency
  the latency gate as plans get it (the p95 bounds at alpha / 2, or the rate of requests over
  the target more than max_ratio x stable's at alpha / 2), and its parts alone:
  the p95 bounds of ``compare_latency`` (mixture, and the DKW band) and the slow-request rate
  (requests above the p95 target, canary vs stable, rate-ratio mixture).

Model: sessions arrive; each goes to the canary with probability rho = 0.05 for the first
step and 0.25 for the second. Each session has one Bernoulli event per rate signal and one
latency (lognormal), bucketed into Prometheus native-histogram buckets (schema 3, factor
2^(1/8), about 9 % apart). A tick is every 50 sessions: 30 s at 100 sessions/min, where the
20,000-session horizon is 3.3 h (at 7 sessions/min it is a 48 h bake; delays are counted in
canary sessions, which do not depend on the load).

The rolloutd tests are evaluated through the library; ticks where an upper bound on the Bayes
factor (the maximum likelihood ratio) is below 1/alpha are skipped, and the p95 bounds use the
monotone rejection boundary of the same statistic: decisions are identical (``--check``
compares them with direct calls).

Run: ``python3 bench/gate_statistics.py [--rollouts 1000] [--jobs 2] [--seed 6]``.
"""

from __future__ import annotations

import argparse
import bisect
import math
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

# Runs from a checkout without installing rolloutd.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rolloutd.analysis.quantiles import Method, compare_latency, dkw_radius, histogram_quantile
from rolloutd.analysis.sequential import (
    Segment,
    beta_binomial_log_bf,
    beta_binomial_test,
    rate_ratio_test,
)

ALPHA = 0.05
PHASES = ((10_000, 0.05), (10_000, 0.25))  # (sessions, canary share) per rollout step
TICK = 50
MIN_CANARY = 100
Z_ONE_SIDED = 1.6448536269514722
RATE_BASELINES = {"timeouts": 0.01, "schema": 0.003, "escalation": 0.05}
RATE_THRESHOLDS = {"timeouts": 0.015, "schema": 0.005, "escalation": 0.055}
LATENCY_MEDIAN, LATENCY_SIGMA = 2.0, 0.5
BASELINE_P95 = LATENCY_MEDIAN * math.exp(LATENCY_SIGMA * Z_ONE_SIDED)
P95_THRESHOLD = 1.15 * BASELINE_P95  # the Flagger threshold, and rolloutd's absolute target
MAX_RATIO = 1.10
BOUNDS = [0.25 * 2 ** (i / 8) for i in range(57)]  # 0.25 s .. 32 s, then +Inf

RATE_METHODS = (
    "threshold",
    "fixed horizon (z)",
    "rolloutd rate-ratio",
    "rolloutd per-step",
    "rolloutd compare gate",
)
# The compare gate's defaults: the every-tick test spends 20% of alpha, the final look 80%.
SEQUENTIAL_SHARE = 0.2
LATENCY_METHODS = (
    "threshold",
    "fixed horizon (MW)",
    "rolloutd p95 bounds",
    "rolloutd p95 DKW",
    "rolloutd slow-rate",
    "rolloutd latency gate",
)


@dataclass(frozen=True)
class Scenario:
    """What the canary does differently; signals not listed are not simulated."""

    name: str
    rates: dict[str, float] = field(default_factory=dict)  # signal -> canary rate
    latency_scale: float | None = None


SCENARIOS = (
    Scenario("A/A", dict(RATE_BASELINES), 1.0),
    Scenario("timeouts 1%->5%", {"timeouts": 0.05}),
    Scenario("schema 0.3%->1%", {"schema": 0.01}),
    Scenario("escalation 5%->6%", {"escalation": 0.06}),
    Scenario("p95 +20%", {}, 1.2),
)


def binomial(rng: random.Random, n: int, p: float) -> int:
    """A Binomial(n, p) draw by inversion (small n * p here)."""
    if n <= 0 or p <= 0:
        return 0
    q = 1 - p
    ratio, a = p / q, (n + 1) * p / q
    mass, u, x = q**n, rng.random(), 0
    while u > mass and x < n:
        u -= mass
        x += 1
        mass *= a / x - ratio
    return x


def bucket_cdf(scale: float) -> list[float]:
    """P(latency <= bound) at each finite bound for a lognormal scaled by ``scale``."""
    mu = math.log(LATENCY_MEDIAN * scale)
    return [0.5 * math.erfc(-(math.log(b) - mu) / (LATENCY_SIGMA * math.sqrt(2))) for b in BOUNDS]


def log_glr(k: float, n: float, rho: float) -> float:
    """log of the largest likelihood ratio over theta >= rho: an upper bound on any mixture."""
    if n <= 0 or k <= n * rho:
        return 0.0
    share = k / n
    value = k * math.log(share / rho)
    if k < n:
        value += (n - k) * math.log((1 - share) / (1 - rho))
    return value


class Boundary:
    """Smallest count k with a one-sided mixture BF >= 1/alpha among n, for n = 0, 1, ...

    One canary event more never lowers the Bayes factor and one stable event more never
    raises it, so k*(n + 1) is k*(n) or k*(n) + 1: one evaluation per n.
    """

    def __init__(self, rho: float, alpha: float) -> None:
        self.rho, self.log_threshold = rho, math.log(1 / alpha)
        self.table = [1]  # n = 0: no count rejects (1 > n)

    def __call__(self, n: int) -> int:
        while len(self.table) <= n:
            m = len(self.table)
            k = self.table[-1]
            rejects = beta_binomial_log_bf(k, m, self.rho) >= self.log_threshold
            self.table.append(k if rejects else k + 1)
        return self.table[n]


Alarms = dict[tuple[str, str], int | None]
"""(signal, method) -> canary sessions seen when the method alarmed, or None; and under
``HORIZON`` the canary sessions of the whole run (where the fixed-horizon test looks)."""
HORIZON = ("horizon", "horizon")


def simulate(scenario: Scenario, seed: int, boundaries: dict[str, Boundary], check: bool) -> Alarms:
    """One rollout: every method judged at every tick, the fixed-horizon tests at the end."""
    rng = random.Random(seed)
    canary_rates = scenario.rates
    signals = list(canary_rates)
    alarms: Alarms = {}
    for signal in signals:
        for method in RATE_METHODS:
            alarms[(signal, method)] = None
    latency = scenario.latency_scale is not None
    if latency:
        for method in LATENCY_METHODS:
            alarms[("latency", method)] = None
        cdf_s, cdf_c = bucket_cdf(1.0), bucket_cdf(scenario.latency_scale or 1.0)
        hist_s, hist_c = [0] * (len(BOUNDS) + 1), [0] * (len(BOUNDS) + 1)
        target_index = next(i for i, b in enumerate(BOUNDS) if b >= P95_THRESHOLD)
        slow = [[0, 0] for _ in PHASES]  # per phase: canary, stable requests above target
    events = {s: [[0, 0] for _ in PHASES] for s in signals}  # per phase: canary, stable
    sessions = [[0, 0] for _ in PHASES]
    canary_total = 0
    for phase, (length, rho) in enumerate(PHASES):
        for _ in range(length // TICK):
            c = binomial(rng, TICK, rho)
            s = TICK - c
            sessions[phase][0] += c
            sessions[phase][1] += s
            canary_total += c
            for signal in signals:
                counts = events[signal][phase]
                counts[0] += binomial(rng, c, canary_rates[signal])
                counts[1] += binomial(rng, s, RATE_BASELINES[signal])
                judge_rates(signal, events[signal], sessions, phase, canary_total, alarms, check)
            if latency:
                for _ in range(c):
                    i = bisect.bisect_left(cdf_c, rng.random())
                    hist_c[i] += 1
                    slow[phase][0] += i > target_index
                for _ in range(s):
                    i = bisect.bisect_left(cdf_s, rng.random())
                    hist_s[i] += 1
                    slow[phase][1] += i > target_index
                judge_latency(
                    hist_c, hist_s, slow, sessions, phase, canary_total, alarms, boundaries, check
                )
    for signal in signals:
        if fixed_horizon_rates(events[signal], sessions):
            alarms[(signal, "fixed horizon (z)")] = canary_total
        # The compare gate's final look: the same test once, at alpha * (1 - share).
        key = (signal, "rolloutd compare gate")
        final_z = NormalDist().inv_cdf(1 - ALPHA * (1 - SEQUENTIAL_SHARE))
        if alarms[key] is None and fixed_horizon_rates(events[signal], sessions, final_z):
            alarms[key] = canary_total
    if latency and mann_whitney_z(hist_c, hist_s) > Z_ONE_SIDED:
        alarms[("latency", "fixed horizon (MW)")] = canary_total
    alarms[HORIZON] = canary_total
    return alarms


def segments_of(counts: list[list[int]], sessions: list[list[int]], upto: int) -> list[Segment]:
    """The steps so far with canary traffic, each with its measured canary share."""
    return [
        Segment(counts[j][0], counts[j][1], sessions[j][0] / (sessions[j][0] + sessions[j][1]))
        for j in range(upto + 1)
        if sessions[j][0] > 0 and sessions[j][1] > 0
    ]


def rate_ratio_rejects(segments: list[Segment], check: bool, alpha: float = ALPHA) -> bool:
    """rolloutd's rate test across steps, skipped when even the best-case ratio cannot reject."""
    bound = sum(
        log_glr(s.canary_events, s.canary_events + s.stable_events, s.rho) for s in segments
    )
    if bound < math.log(1 / alpha) and not check:
        return False
    rejects = rate_ratio_test(segments, alpha=alpha).reject
    assert not (rejects and bound < math.log(1 / alpha)), "GLR screen is not an upper bound"
    return rejects


def per_step_rejects(segment: Segment | None, check: bool, share: float = 1.0) -> bool:
    """The Beta-binomial test on the current step alone, at ``share`` of alpha split over
    the steps."""
    if segment is None:
        return False
    n = segment.canary_events + segment.stable_events
    alpha = ALPHA * share / len(PHASES)
    bound = log_glr(segment.canary_events, n, segment.rho)
    if bound < math.log(1 / alpha) and not check:
        return False
    rejects = beta_binomial_test(
        segment.canary_events, segment.stable_events, segment.rho, alpha=alpha
    ).reject
    assert not (rejects and bound < math.log(1 / alpha)), "GLR screen is not an upper bound"
    return rejects


def judge_rates(
    signal: str,
    counts: list[list[int]],
    sessions: list[list[int]],
    phase: int,
    canary_total: int,
    alarms: dict[tuple[str, str], int | None],
    check: bool,
) -> None:
    """The rate methods at this tick, for one signal."""
    key = (signal, "threshold")
    if alarms[key] is None and canary_total >= MIN_CANARY:
        canary_events = sum(c[0] for c in counts)
        if canary_events / canary_total > RATE_THRESHOLDS[signal]:
            alarms[key] = canary_total
    segments = segments_of(counts, sessions, phase)
    key = (signal, "rolloutd rate-ratio")
    if alarms[key] is None and segments and rate_ratio_rejects(segments, check):
        alarms[key] = canary_total
    key = (signal, "rolloutd per-step")
    current = segments[-1] if segments and sessions[phase][0] > 0 else None
    if alarms[key] is None and per_step_rejects(current, check):
        alarms[key] = canary_total
    key = (signal, "rolloutd compare gate")
    if (
        alarms[key] is None
        and segments
        and rate_ratio_rejects(segments, check, ALPHA * SEQUENTIAL_SHARE)
    ):
        alarms[key] = canary_total


def judge_latency(
    hist_c: list[int],
    hist_s: list[int],
    slow: list[list[int]],
    sessions: list[list[int]],
    phase: int,
    canary_total: int,
    alarms: dict[tuple[str, str], int | None],
    boundaries: dict[str, Boundary],
    check: bool,
) -> None:
    """The latency methods at this tick."""
    cum_c = cumulative(hist_c)
    cum_s = cumulative(hist_s)
    n_c, n_s = cum_c[-1], cum_s[-1]
    key = ("latency", "threshold")
    if check and n_c:
        estimate = histogram_quantile(0.95, as_buckets(cum_c))
        assert p95_above(cum_c, P95_THRESHOLD) == (estimate > P95_THRESHOLD), "p95 shortcut"
    if alarms[key] is None and n_c >= MIN_CANARY and p95_above(cum_c, P95_THRESHOLD):
        alarms[key] = canary_total
    # compare_latency with a stable comparison puts alpha / 2 on each pool's bound.
    key = ("latency", "rolloutd p95 bounds")
    if alarms[key] is None:
        k_c = boundaries["canary"](n_c)  # requests above b needed to claim p95 > b
        k_s = boundaries["stable"](n_s)  # requests at or below b needed to claim p95 <= b
        lower = last_bound(lambda i: n_c - cum_c[i] >= k_c)
        upper = first_bound(lambda i: cum_s[i] >= k_s)
        flagged = flags(lower, upper)
        if check:
            assert flagged == direct(cum_c, cum_s, "mixture"), "boundary table disagrees"
        if flagged:
            alarms[key] = canary_total
    key = ("latency", "rolloutd p95 DKW")
    if alarms[key] is None:
        eps_c = dkw_radius(n_c, ALPHA / 2)
        eps_s = dkw_radius(n_s, ALPHA / 2)
        lower = last_bound(lambda i: cum_c[i] / n_c + eps_c < 0.95) if n_c else None
        upper = first_bound(lambda i: cum_s[i] / n_s - eps_s >= 0.95) if n_s else None
        flagged = flags(lower, upper)
        if check:
            assert flagged == direct(cum_c, cum_s, "dkw"), "DKW scan disagrees"
        if flagged:
            alarms[key] = canary_total
    key = ("latency", "rolloutd slow-rate")
    if alarms[key] is None:
        segments = segments_of(slow, sessions, phase)
        if segments and rate_ratio_rejects(segments, check):
            alarms[key] = canary_total
    # The latency gate as plans get it: the p95 bounds at alpha / 2 (alpha / 4 a side), or
    # the slow-request rate more than max_ratio x stable's at alpha / 2.
    key = ("latency", "rolloutd latency gate")
    if alarms[key] is None:
        k_c = boundaries["gate canary"](n_c)
        k_s = boundaries["gate stable"](n_s)
        lower = last_bound(lambda i: n_c - cum_c[i] >= k_c)
        upper = first_bound(lambda i: cum_s[i] >= k_s)
        flagged = flags(lower, upper)
        if not flagged:
            shifted = [
                Segment(g.canary_events, g.stable_events, shift(g.rho, MAX_RATIO))
                for g in segments_of(slow, sessions, phase)
            ]
            flagged = bool(shifted) and rate_ratio_rejects(shifted, check, ALPHA / 2)
        if flagged:
            alarms[key] = canary_total


def shift(rho: float, ratio: float) -> float:
    """The canary share under which "rate ratio <= 1" means "<= ``ratio``" (the gate's)."""
    return rho * ratio / (rho * ratio + 1 - rho)


def flags(lower: float | None, upper: float | None) -> bool:
    """compare_latency's rule: canary lower bound >= target, or >= max_ratio x stable upper."""
    if lower is None:
        return False
    return lower >= P95_THRESHOLD or (upper is not None and lower >= MAX_RATIO * upper)


def direct(cum_c: list[int], cum_s: list[int], method: Method) -> bool:
    """The same decision straight from the library, for ``--check``."""
    result = compare_latency(
        as_buckets(cum_c),
        as_buckets(cum_s),
        target_seconds=P95_THRESHOLD,
        max_ratio=MAX_RATIO,
        alpha=ALPHA,
        method=method,
    )
    return result.regressed


def as_buckets(cum: list[int]) -> list[tuple[float, float]]:
    """Cumulative counts as the (le, count) pairs Prometheus returns."""
    return [*zip(BOUNDS, map(float, cum[:-1]), strict=True), (math.inf, float(cum[-1]))]


def cumulative(hist: list[int]) -> list[int]:
    """Per-bucket counts to cumulative ones."""
    out, running = [], 0
    for count in hist:
        running += count
        out.append(running)
    return out


def last_bound(holds: Callable[[int], bool]) -> float | None:
    """The largest finite bound where ``holds`` (true on a prefix), or None."""
    low, high = 0, len(BOUNDS)
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if holds(middle) else (low, middle)
    return BOUNDS[low - 1] if low > 0 else None


def first_bound(holds: Callable[[int], bool]) -> float | None:
    """The smallest finite bound where ``holds`` (true on a suffix), or None."""
    low, high = 0, len(BOUNDS)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle + 1, high)
    return BOUNDS[low] if low < len(BOUNDS) else None


def p95_above(cum: list[int], value: float) -> bool:
    """histogram_quantile(0.95) > value, via the interpolated CDF at ``value`` (monotone)."""
    i = bisect.bisect_left(BOUNDS, value)
    start = BOUNDS[i - 1] if i > 0 else 0.0
    below = cum[i - 1] if i > 0 else 0
    at_value = below + (cum[i] - below) * (value - start) / (BOUNDS[i] - start)
    return 0.95 * cum[-1] > at_value


def fixed_horizon_rates(
    counts: list[list[int]], sessions: list[list[int]], critical: float = Z_ONE_SIDED
) -> bool:
    """One-sided pooled two-proportion z test over the whole horizon."""
    k_c, k_s = sum(c[0] for c in counts), sum(c[1] for c in counts)
    n_c, n_s = sum(s[0] for s in sessions), sum(s[1] for s in sessions)
    pooled = (k_c + k_s) / (n_c + n_s)
    if pooled in (0.0, 1.0):
        return False
    z = (k_c / n_c - k_s / n_s) / math.sqrt(pooled * (1 - pooled) * (1 / n_c + 1 / n_s))
    return z > critical


def mann_whitney_z(hist_c: Sequence[int], hist_s: Sequence[int]) -> float:
    """One-sided z of "canary slower" from bucket counts, ties (same bucket) at 1/2."""
    n_c, n_s = sum(hist_c), sum(hist_s)
    total = n_c + n_s
    u, below, ties = 0.0, 0, 0.0
    for c, s in zip(hist_c, hist_s, strict=True):
        u += c * (below + s / 2)
        below += s
        t = c + s
        ties += t**3 - t
    variance = n_c * n_s / 12 * ((total + 1) - ties / (total * (total - 1)))
    return (u - n_c * n_s / 2) / math.sqrt(variance)


def run_chunk(task: tuple[int, int, int, int, bool]) -> list[Alarms]:
    """A worker: ``count`` rollouts of one scenario, seeded by rollout index."""
    scenario_index, first, count, seed, check = task
    scenario = SCENARIOS[scenario_index]
    boundaries = _BOUNDARIES
    return [
        simulate(
            scenario,
            seed * 1_000_003 + scenario_index * 100_003 + i,
            boundaries,
            check and i < first + CHECK_ROLLOUTS,
        )
        for i in range(first, first + count)
    ]


CHECK_ROLLOUTS = 3
# p95 bounds: canary "above b" at alpha/2 (null share 0.05 above), stable "at or below b"
# at alpha/2 (null share 0.95 at or below); built lazily in each worker process.
_BOUNDARIES = {
    "canary": Boundary(0.05, ALPHA / 2),
    "stable": Boundary(0.95, ALPHA / 2),
    "gate canary": Boundary(0.05, ALPHA / 4),
    "gate stable": Boundary(0.95, ALPHA / 4),
}


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson 95 % interval for a proportion."""
    z = 1.959963984540054
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def median_delay(delays: Sequence[float | None]) -> float:
    """Median over all runs, a miss counting as infinitely late."""
    ordered = sorted(math.inf if d is None else d for d in delays)
    return statistics.median_low(ordered)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario, print the parameters, the table and the checks."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"compare fast paths with direct library calls on {CHECK_ROLLOUTS} rollouts per chunk",
    )
    args = parser.parse_args(argv)
    print(parameters(args))
    started = time.monotonic()
    chunk = max(1, min(100, args.rollouts // (4 * args.jobs) or 1))
    rows = []
    with multiprocessing.Pool(args.jobs) as pool:
        for index, scenario in enumerate(SCENARIOS):
            tasks = [
                (index, first, min(chunk, args.rollouts - first), args.seed, args.check)
                for first in range(0, args.rollouts, chunk)
            ]
            outcomes: list[Alarms] = []
            for part in pool.imap(run_chunk, tasks):
                outcomes.extend(part)
            rows.extend(summarise(scenario, outcomes))
            print(
                f"  {scenario.name}: {len(outcomes)} rollouts, "
                f"{time.monotonic() - started:.0f} s elapsed",
                file=sys.stderr,
                flush=True,
            )
    print(table(rows))
    print(verdicts(rows))
    print(
        f"\n{args.rollouts} rollouts per scenario, {args.jobs} jobs, "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


@dataclass(frozen=True)
class Row:
    """One line of the table: a method on a signal in a scenario."""

    scenario: str
    signal: str
    method: str
    runs: int
    alarms: int
    median_all: float
    median_share: float
    median_detected: float | None
    null: bool


def summarise(scenario: Scenario, outcomes: list[Alarms]) -> list[Row]:
    """Alarm counts and delays per (signal, method)."""
    rows = []
    horizons = [o[HORIZON] or 1 for o in outcomes]
    for key in outcomes[0]:
        if key == HORIZON:
            continue
        delays = [o[key] for o in outcomes]
        # The delay as a share of the run's own horizon: a detection at the end is 1.0 for
        # every method, so runs of different lengths do not tilt the comparison.
        shares = [None if d is None else d / h for d, h in zip(delays, horizons, strict=True)]
        hits = [d for d in delays if d is not None]
        rows.append(
            Row(
                scenario.name,
                key[0],
                key[1],
                len(delays),
                len(hits),
                median_delay(delays),
                median_delay(shares),
                statistics.median_low(hits) if hits else None,
                scenario.name == "A/A",
            )
        )
    return rows


def table(rows: list[Row]) -> str:
    """The results as a Markdown table."""
    lines = [
        "",
        "| scenario | signal | method | alarm rate (95% CI) | median delay, all runs |"
        " median delay, detected |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = wilson(r.alarms, r.runs)
        kind = "false alarms" if r.null else "detected"
        rate = f"{r.alarms / r.runs:.1%} {kind} ({low:.1%}-{high:.1%})"
        if r.null:
            all_runs = detected = "-"
        else:
            all_runs = "not reached" if math.isinf(r.median_all) else f"{r.median_all:.0f}"
            detected = "-" if r.median_detected is None else f"{r.median_detected:.0f}"
        lines.append(
            f"| {r.scenario} | {r.signal} | {r.method} | {rate} | {all_runs} | {detected} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[Row]) -> str:
    """Issue #6's two requirements, checked for every rolloutd method."""
    out = [
        "",
        "Checks (alpha = 0.05; delays are medians over all runs, a miss counting as late, each"
        " run's delay taken as a share of its own horizon):",
    ]
    for r in rows:
        if not r.method.startswith("rolloutd"):
            continue
        if r.null:
            ok = r.alarms / r.runs <= ALPHA
            out.append(
                f"- A/A {r.signal}, {r.method}: false-alarm rate {r.alarms / r.runs:.1%}"
                f" {'<=' if ok else '>'} alpha: {'OK' if ok else 'FAILS'}"
            )
            continue
        fixed = next(
            x
            for x in rows
            if x.scenario == r.scenario and x.signal == r.signal and x.method.startswith("fixed")
        )
        ok = r.median_share <= fixed.median_share and not math.isinf(r.median_share)
        mine = "not reached" if math.isinf(r.median_all) else f"{r.median_all:.0f}"
        theirs = "not reached" if math.isinf(fixed.median_all) else f"{fixed.median_all:.0f}"
        out.append(
            f"- {r.scenario}, {r.method}: median delay {mine} vs fixed horizon {theirs}"
            f" canary sessions: {'OK' if ok else 'NOT as fast'}"
        )
    return "\n".join(out)


def parameters(args: argparse.Namespace) -> str:
    """The simulation parameters, printed above the table."""
    steps = ", ".join(f"{n} sessions at rho={rho}" for n, rho in PHASES)
    return "\n".join(
        [
            "# Gate statistics benchmark",
            "",
            f"- rollouts per scenario: {args.rollouts} (seed {args.seed}); steps: {steps};"
            f" a tick every {TICK} sessions; alpha = {ALPHA}",
            f"- baselines: {RATE_BASELINES}; thresholds (polled): {RATE_THRESHOLDS},"
            f" after >= {MIN_CANARY} canary sessions",
            f"- latency: lognormal median {LATENCY_MEDIAN} s, sigma {LATENCY_SIGMA} (p95"
            f" {BASELINE_P95:.2f} s); buckets 0.25 s x 2^(i/8) to {BOUNDS[-1]:.0f} s + +Inf",
            f"- p95 threshold (polled) and rolloutd's target: {P95_THRESHOLD:.2f} s"
            f" (1.15 x baseline); rolloutd max_ratio {MAX_RATIO}; slow requests: above the"
            " first bound >= the target",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
