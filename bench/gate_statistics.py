"""False alarms and detection delays of rolloutd's gates on realistic agent traffic, before
and after the gates learned that a session's turns share a fate (numpy, seeded).

Every rollout runs two steps, 5% then 25% of sessions, 100 minutes each at 100 sessions a
minute (10,000 sessions a step), with a tick every 30 s. The traffic (``bench/traffic.py``)
is sessions of 15 turns counted by Prometheus-like counters: per-replica series scraped every
15 s and read with ``increase()``'s reset handling and extrapolation. Conditions, alone and
all at once: independent requests; sessions whose turns share a timeout and schema-violation
probability (intra-session correlation 0.02 and 0.1); load swinging +-30% a minute on both
pools, with the second step 30% busier; a canary share of 4.3% for a planned 5% (21.5% for
25%); a canary replica restarting mid-step (its counters reset); scrape gaps (2% of scrapes
lost and a 3-minute gap on a canary target).

Gates, side by side on the same traffic:

- ``fixed horizon``: one pooled two-proportion z test at alpha when the horizon is reached
  (Kayenta style), for context; Mann-Whitney on the histograms for latency.
- ``before``: the compare gate as it was: the rate-ratio mixture over the steps' events at
  20% of alpha every tick, then a pooled two-proportion z test over both steps at 80%.
- ``after``: ``rolloutd.analysis.comparisons.compare_rates``, the compare gate's statistics:
  the same mixture with its evidence divided by the dispersion estimated from the steps'
  blocks, then a Cochran-Mantel-Haenszel look stratified by block (so by step).
- ``latency``: the latency gate, unchanged: one column. Its p95 bounds (alpha/2) judge
  the histogram since the step began, as the gate asks for it; its slow-request rate test
  (alpha/2) carries the earlier step's counts.

The suite rules are simulated apart: 11 daily runs of a 300-case suite plus a 300-case
sampled suite, each run's pairs drawn afresh (the runs' noise independent: the worst case
for spending alpha across them); ``before`` judges every run at alpha (Tango's normal
approximation for ``max_drop``), ``after`` spends ``spent_alpha`` with the exact test.

Ticks where the largest likelihood ratio is below 1/alpha are skipped (no mixture can reject
there, whatever the dispersion); ``--check`` judges every tick and asserts the screen.
Delays are canary sessions when the gate fails, the median over all runs with a miss
counting as never.

Run: ``python3 bench/gate_statistics.py [--rollouts 1000] [--jobs 2] [--seed 6]``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

# Runs from a checkout without installing rolloutd.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.traffic import (
    BASE,
    BOUNDS,
    HORIZON,
    LATENCY_MEDIAN,
    LATENCY_SIGMA,
    SIGNALS,
    STEP_SECONDS,
    TICK,
    Canary,
    Conditions,
    Traffic,
    simulate,
)
from rolloutd.analysis.comparisons import compare_rates
from rolloutd.analysis.sequential import (
    Segment,
    beta_binomial_log_bf,
    rate_ratio_test,
    two_proportion_test,
)
from rolloutd.analysis.stratified import Tally, block_count, blocks_from_cuts
from rolloutd.evaluation.statistics import (
    PairedCounts,
    exact_critical_z,
    max_drop_test,
    score_statistic,
    spent_alpha,
    worse_p_value,
)

ALPHA = 0.05
SHARE = 0.2  # the compare gate's default sequential_share
Z_ONE_SIDED = NormalDist().inv_cdf(1 - ALPHA)
BASELINE_P95 = LATENCY_MEDIAN * math.exp(LATENCY_SIGMA * Z_ONE_SIDED)
P95_TARGET = 1.15 * BASELINE_P95
MAX_RATIO = 1.10
BOUND_LIST = [float(b) for b in BOUNDS]
RATE_METHODS = ("fixed horizon", "before", "after")
BLOCK = 300.0  # a compare gate's default window: its shortest block
# As the gate decides by default (``comparisons.clustered``): escalations come once per session.
CLUSTERED = {"timeouts": True, "schema": True, "escalation": False}
GATES = ("timeouts", "schema", "escalation", "latency")

INDEPENDENT = Conditions("independent requests")
EVERYTHING = Conditions(
    "all at once (ICC 0.1)",
    icc=0.1,
    load_swing=0.3,
    busier_second_step=1.3,
    share_factor=0.86,
    restart=True,
    gaps=True,
)
CONDITIONS = (
    INDEPENDENT,
    Conditions("sessions, ICC 0.02", icc=0.02),
    Conditions("sessions, ICC 0.1", icc=0.1),
    Conditions("load +-30%/min, step 2 x1.3", load_swing=0.3, busier_second_step=1.3),
    Conditions("canary share 4.3% for 5%", share_factor=0.86),
    Conditions("a canary replica restarts", restart=True),
    Conditions("scrape gaps", gaps=True),
    EVERYTHING,
)
REGRESSIONS = (
    ("timeouts 1%->5%", Canary(timeouts=0.05), "timeouts"),
    ("schema 0.3%->1%", Canary(schema=0.01), "schema"),
    ("escalation 5%->6%", Canary(escalation=0.06), "escalation"),
    ("p95 +20%", Canary(latency_scale=1.2), "latency"),
)


@dataclass(frozen=True)
class Scenario:
    """Traffic conditions and what the canary does differently (None: an A/A rollout)."""

    name: str
    conditions: Conditions
    canary: Canary
    regressed: str | None


SCENARIOS = tuple(
    [Scenario(f"A/A, {c.name}", c, Canary(), None) for c in CONDITIONS]
    + [
        Scenario(f"{name}, {c.name}", c, canary, gate)
        for c in (INDEPENDENT, EVERYTHING)
        for name, canary, gate in REGRESSIONS
    ]
)

Outcome = dict[str, float | None]
"""``gate/method`` -> canary sessions when it failed (None: never); ``dispersion/<signal>``
-> the dispersion ``after`` used at the horizon."""


# --- rate gates ------------------------------------------------------------------------------


def log_glr(k: float, n: float, rho: float) -> float:
    """log of the largest likelihood ratio over theta >= rho: an upper bound on any mixture."""
    if n <= 0 or k <= n * rho:
        return 0.0
    share = k / n
    value = k * math.log(share / rho)
    if k < n:
        value += (n - k) * math.log((1 - share) / (1 - rho))
    return value


def as_tally(row: np.ndarray) -> Tally:
    """A row of ``Traffic.tallies`` as the library's Tally."""
    return Tally(float(row[0]), float(row[1]), float(row[2]), float(row[3]))


def segment(tally: Tally) -> Segment:
    """A step's totals as the mixture's segment (the share measured from exposure)."""
    share = tally.share
    assert share is not None
    return Segment(tally.canary_events, tally.stable_events, share)


def usable(row: np.ndarray) -> bool:
    """Measured (fresh, two samples) with exposure on both pools: the gate judges it."""
    return bool(np.isfinite(row).all() and row[1] > 0 and row[3] > 0)


class Windows:
    """One signal's counts at every tick since its step began, and at each tick's block cuts,
    as the compare gate asks for them."""

    def __init__(self, traffic: Traffic, signal: str) -> None:
        self.ticks = np.arange(TICK, HORIZON + TICK / 2, TICK)
        starts = np.where(self.ticks > STEP_SECONDS, STEP_SECONDS, 0.0)
        self.whole = traffic.tallies(signal, starts, self.ticks)
        counts = [
            block_count(t - s, BLOCK) if CLUSTERED[signal] else 1
            for s, t in zip(starts, self.ticks, strict=True)
        ]
        cut_start = np.concatenate([np.full(b - 1, s) for s, b in zip(starts, counts, strict=True)])
        cut_end = np.concatenate(
            [
                s + (t - s) * np.arange(1, b) / b
                for s, t, b in zip(starts, self.ticks, counts, strict=True)
            ]
        )
        self.cuts = traffic.tallies(signal, cut_start, cut_end)
        self.offsets = np.concatenate([[0], np.cumsum([b - 1 for b in counts])])

    def blocks(self, i: int) -> list[Tally]:
        """The blocks of tick ``i``'s step so far, built as the gate builds them."""
        rows = self.cuts[self.offsets[i] : self.offsets[i + 1]]
        cuts = [as_tally(r) if np.isfinite(r).all() else None for r in rows]
        return blocks_from_cuts(cuts, as_tally(self.whole[i]))


def judge_rates(traffic: Traffic, signal: str, check: bool) -> Outcome:
    """Every tick of one rollout for one signal: when each method fails, if it does."""
    windows = Windows(traffic, signal)
    ticks, whole = windows.ticks, windows.whole
    end_of_first = int(np.searchsorted(ticks, STEP_SECONDS))
    first = as_tally(whole[end_of_first]) if usable(whole[end_of_first]) else None
    first_blocks = windows.blocks(end_of_first) if first is not None else []
    outcome: Outcome = {f"{signal}/{m}": None for m in RATE_METHODS}
    threshold = math.log(1 / (ALPHA * SHARE))
    for i, t in enumerate(ticks):
        if not usable(whole[i]):
            continue  # inconclusive (stale or no samples) or pending (no exposure yet)
        later = t > STEP_SECONDS
        if later and first is None:
            continue  # the earlier step cannot be measured: inconclusive, as in the gate
        current = as_tally(whole[i])
        steps = [first, current] if later and first is not None else [current]
        bound = sum(log_glr(s.canary_events, s.events, segment(s).rho) for s in steps)
        if bound < threshold and not check:
            continue
        seen = float(traffic.canary_sessions(t))
        if outcome[f"{signal}/before"] is None:
            rejects = rate_ratio_test([segment(s) for s in steps], alpha=ALPHA * SHARE).reject
            assert not (rejects and bound < threshold), "GLR screen is not an upper bound"
            if rejects:
                outcome[f"{signal}/before"] = seen
        if outcome[f"{signal}/after"] is None:
            step_blocks = [first_blocks, windows.blocks(i)] if later else [windows.blocks(i)]
            result = compare_rates(
                step_blocks, alpha=ALPHA, sequential_share=SHARE, clustered=CLUSTERED[signal]
            )
            rejects = result.sequential.reject
            assert not (rejects and bound < threshold), "GLR screen is not an upper bound"
            if rejects:
                outcome[f"{signal}/after"] = seen
    last = len(ticks) - 1
    final = [first_blocks, windows.blocks(last)] if first and usable(whole[last]) else None
    outcome.update(judge_horizon(traffic, signal, outcome, final))
    return outcome


def judge_horizon(
    traffic: Traffic, signal: str, outcome: Outcome, final: list[list[Tally]] | None
) -> Outcome:
    """The looks at the horizon: a pooled z test at alpha (fixed horizon), the old final look
    (pooled z over both steps at 80% of alpha) and the new one (stratified, from
    ``compare_rates``), each only where the method has not failed yet."""
    found: Outcome = {}
    horizon = float(traffic.canary_sessions(HORIZON))
    everything = traffic.tallies(signal, np.array([0.0]), np.array([HORIZON]))[0]
    if usable(everything):
        pooled = as_tally(everything)
        for method, alpha in (("fixed horizon", ALPHA), ("before", ALPHA * (1 - SHARE))):
            look = two_proportion_test(
                pooled.canary_events,
                pooled.canary_exposure,
                pooled.stable_events,
                pooled.stable_exposure,
                alpha=alpha,
            )
            if outcome[f"{signal}/{method}"] is None and look.reject:
                found[f"{signal}/{method}"] = horizon
    if final is not None:
        result = compare_rates(
            final, alpha=ALPHA, sequential_share=SHARE, final=final, clustered=CLUSTERED[signal]
        )
        assert result.final is not None
        if outcome[f"{signal}/after"] is None and result.final.reject:
            found[f"{signal}/after"] = horizon
        found[f"dispersion/{signal}"] = result.final.dispersion.phi
    return found


# --- the latency gate (unchanged: measured, not fixed here) ------------------------------------


class Boundary:
    """Smallest count k with a one-sided mixture BF >= 1/alpha among n, for n = 0, 1, ..."""

    def __init__(self, rho: float, alpha: float) -> None:
        self.rho, self.log_threshold = rho, math.log(1 / alpha)
        self.table = [1]

    def __call__(self, n: int) -> int:
        while len(self.table) <= n:
            m = len(self.table)
            k = self.table[-1]
            rejects = beta_binomial_log_bf(k, m, self.rho) >= self.log_threshold
            self.table.append(k if rejects else k + 1)
        return self.table[n]


# compare_latency against stable: alpha/2 for the bounds (alpha/4 a pool), alpha/2 for the
# slow-request rate.
_GATE_CANARY = Boundary(0.05, ALPHA / 4)
_GATE_STABLE = Boundary(0.95, ALPHA / 4)


def last_bound(holds: Callable[[int], bool]) -> float | None:
    """The largest finite bound where ``holds`` (true on a prefix), or None."""
    low, high = 0, len(BOUND_LIST)
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if holds(middle) else (low, middle)
    return BOUND_LIST[low - 1] if low > 0 else None


def first_bound(holds: Callable[[int], bool]) -> float | None:
    """The smallest finite bound where ``holds`` (true on a suffix), or None."""
    low, high = 0, len(BOUND_LIST)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle + 1, high)
    return BOUND_LIST[low] if low < len(BOUND_LIST) else None


def shift(rho: float, ratio: float) -> float:
    """The canary share under which "rate ratio <= 1" means "<= ``ratio``" (the gate's)."""
    return rho * ratio / (rho * ratio + 1 - rho)


def mann_whitney_z(hist_c: Sequence[float], hist_s: Sequence[float]) -> float:
    """One-sided z of "canary slower" from bucket counts, ties (same bucket) at 1/2."""
    n_c, n_s = sum(hist_c), sum(hist_s)
    total = n_c + n_s
    u, below, ties = 0.0, 0.0, 0.0
    for c, s in zip(hist_c, hist_s, strict=True):
        u += c * (below + s / 2)
        below += s
        t = c + s
        ties += t**3 - t
    variance = n_c * n_s / 12 * ((total + 1) - ties / (total * (total - 1)))
    return (u - n_c * n_s / 2) / math.sqrt(variance)


def p95_flags(cum_c: list[float], cum_s: list[float]) -> bool:
    """compare_latency's p95 rule on cumulative bucket counts: the canary's lower bound at or
    above the target, or above ``max_ratio`` x stable's upper bound."""
    n_c, n_s = int(cum_c[-1]), int(cum_s[-1])
    k_c, k_s = _GATE_CANARY(n_c), _GATE_STABLE(n_s)
    lower = last_bound(lambda j: n_c - cum_c[j] >= k_c)
    upper = first_bound(lambda j: cum_s[j] >= k_s)
    if lower is None:
        return False
    return lower >= P95_TARGET or (upper is not None and lower >= MAX_RATIO * upper)


def judge_latency(traffic: Traffic) -> Outcome:
    """The latency gate at every tick: p95 bounds on the step's histogram so far, or the
    slow-request rate over the steps."""
    ticks = np.arange(TICK, HORIZON + TICK / 2, TICK)
    target = next(i for i, b in enumerate(BOUND_LIST) if b >= P95_TARGET)
    cumulative, slow, seen = {}, {}, {}
    for pool, (times, latency) in traffic.latency.items():
        tick = np.minimum((times // TICK).astype(int), len(ticks) - 1)
        bucket = np.searchsorted(BOUNDS, latency, side="left")
        width = len(BOUNDS) + 1
        grid = np.bincount(tick * width + bucket, minlength=len(ticks) * width)
        grid = grid.reshape(len(ticks), width).astype(float)
        cumulative[pool] = np.cumsum(np.cumsum(grid, axis=0), axis=1)  # over ticks, then le
        cell = tick * 2 + (times >= STEP_SECONDS).astype(int)
        over = np.bincount(cell, weights=bucket > target, minlength=len(ticks) * 2)
        total = np.bincount(cell, minlength=len(ticks) * 2).astype(float)
        slow[pool] = np.cumsum(over.reshape(len(ticks), 2), axis=0)
        seen[pool] = np.cumsum(total.reshape(len(ticks), 2), axis=0)
    outcome: Outcome = {"latency/fixed horizon": None, "latency/after": None}
    end_of_first = int(np.searchsorted(ticks, STEP_SECONDS))
    for i, t in enumerate(ticks):
        # The p95 bounds judge the window since the step began, as the gate asks for it.
        since = {
            pool: cumulative[pool][i] - (cumulative[pool][end_of_first] if i > end_of_first else 0)
            for pool in ("canary", "stable")
        }
        flagged = p95_flags(since["canary"].tolist(), since["stable"].tolist())
        if not flagged:
            segments = []
            for step in range(1 + int(t > STEP_SECONDS)):
                c, s = seen["canary"][i, step], seen["stable"][i, step]
                if c > 0 and s > 0:
                    rho = shift(c / (c + s), MAX_RATIO)
                    segments.append(Segment(slow["canary"][i, step], slow["stable"][i, step], rho))
            bound = sum(
                log_glr(g.canary_events, g.canary_events + g.stable_events, g.rho) for g in segments
            )
            if segments and bound >= math.log(2 / ALPHA):
                flagged = rate_ratio_test(segments, alpha=ALPHA / 2).reject
        if flagged:
            outcome["latency/after"] = float(traffic.canary_sessions(t))
            break
    final_c = np.diff(cumulative["canary"][-1], prepend=0).tolist()
    final_s = np.diff(cumulative["stable"][-1], prepend=0).tolist()
    if mann_whitney_z(final_c, final_s) > Z_ONE_SIDED:
        outcome["latency/fixed horizon"] = float(traffic.canary_sessions(HORIZON))
    outcome["latency/before"] = outcome["latency/after"]
    return outcome


# --- running ---------------------------------------------------------------------------------


def run_chunk(task: tuple[int, int, int, int, bool]) -> list[Outcome]:
    """A worker: ``count`` rollouts of one scenario, each seeded by its index."""
    scenario_index, first, count, seed, check = task
    scenario = SCENARIOS[scenario_index]
    outcomes = []
    for i in range(first, first + count):
        rng = np.random.default_rng([seed, scenario_index, i])
        traffic = simulate(scenario.conditions, scenario.canary, rng)
        outcome: Outcome = {}
        for signal in SIGNALS:
            outcome.update(judge_rates(traffic, signal, check and i < first + 2))
        outcome.update(judge_latency(traffic))
        outcome["horizon"] = float(traffic.canary_sessions(HORIZON))
        outcomes.append(outcome)
    return outcomes


def median_delay(delays: Sequence[float | None]) -> float:
    """Median over all runs, a miss counting as infinitely late."""
    return statistics.median_low(sorted(math.inf if d is None else d for d in delays))


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval for a proportion."""
    z = 1.959963984540054
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_cell(delays: Sequence[float | None], null: bool) -> tuple[str, float]:
    """A table cell: false-alarm rate (A/A) or median delay and detected share."""
    hits = sum(d is not None for d in delays)
    if null:
        return f"{hits / len(delays):.1%}", hits / len(delays)
    median = median_delay(delays)
    shown = "never" if math.isinf(median) else f"{median:,.0f}"
    return f"{shown} ({hits / len(delays):.0%})", median


def table(results: list[tuple[Scenario, list[Outcome]]]) -> str:
    """Gates by scenario: fixed horizon, before, after and after/before."""
    lines = [
        "",
        "| scenario | gate | fixed horizon | before | after | after / before |",
        "|---|---|---|---|---|---|",
    ]
    for scenario, outcomes in results:
        null = scenario.regressed is None
        for gate in GATES if null else (scenario.regressed or "",):
            cells, values = [], []
            for method in RATE_METHODS:
                text, value = rate_cell([o.get(f"{gate}/{method}") for o in outcomes], null)
                cells.append(text)
                values.append(value)
            before, after = values[1], values[2]
            if before == 0 or math.isinf(before) or math.isinf(after):
                ratio = "-" if before == after else ("never" if math.isinf(after) else "-")
            else:
                ratio = f"{after / before:.2f}x"
            lines.append(f"| {scenario.name} | {gate} | {' | '.join(cells)} | {ratio} |")
    return "\n".join(lines)


def dispersion_table(results: list[tuple[Scenario, list[Outcome]]]) -> str:
    """The dispersion the compare gate estimated at the horizon (median over rollouts)."""
    lines = [
        "",
        "Dispersion used by the final look (median, 10th-90th percentile):",
        "",
        "| scenario | timeouts | schema | escalation |",
        "|---|---|---|---|",
    ]
    for scenario, outcomes in results:
        if scenario.regressed is not None:
            continue
        cells = []
        for signal in SIGNALS:
            values = sorted(v for o in outcomes if (v := o.get(f"dispersion/{signal}")) is not None)
            if not values:
                cells.append("-")
                continue
            n = len(values)
            cells.append(f"{values[n // 2]:.2f} ({values[n // 10]:.2f}-{values[9 * n // 10]:.2f})")
        lines.append(f"| {scenario.name} | {' | '.join(cells)} |")
    return "\n".join(lines)


# --- the suite ---------------------------------------------------------------------------------

SUITE_CASES, SUITE_RUNS, SUITE_LOOKS, MARGIN = 300, 11, 2, 0.01
SUITE_CELLS = (
    ("max_drop", 0.05, 0.0),
    ("max_drop", 0.02, 0.01),
    ("max_drop", 0.05, 0.01),
    ("max_drop", 0.05, 0.03),
    ("max_drop", 0.05, 0.05),
    ("at_least_baseline", 0.05, 0.0),
    ("at_least_baseline", 0.05, 0.02),
    ("at_least_baseline", 0.05, 0.05),
)


def suite_rollouts(
    rule: str, churn: float, drop: float, rollouts: int, seed: int, check: bool
) -> tuple[list[int | None], list[int | None]]:
    """The run (1-11) at which each rule first fires in each rollout, before and after."""
    rng = np.random.default_rng([seed, 99, round(churn * 1000), round(drop * 1000)])
    worse, better = churn / 2 + drop, churn / 2
    draws = rng.multinomial(
        SUITE_CASES, [worse, better, 1 - worse - better], size=(rollouts, SUITE_RUNS, SUITE_LOOKS)
    )
    normal = NormalDist().inv_cdf(1 - ALPHA)
    critical = [
        exact_critical_z(SUITE_CASES, MARGIN, spent_alpha(ALPHA, t, SUITE_LOOKS))
        for t in range(1, SUITE_RUNS + 1)
    ]
    before: list[int | None] = []
    after: list[int | None] = []
    checked = 0
    for rollout in draws:
        first_before = first_after = None
        for t, looks in enumerate(rollout, start=1):
            level = spent_alpha(ALPHA, t, SUITE_LOOKS)
            for b, c, _ in looks:
                counts = PairedCounts(SUITE_CASES - b - c, int(b), int(c), 0)
                if rule == "max_drop":
                    z = score_statistic(counts, MARGIN)
                    old = z > normal
                    new = b - c > SUITE_CASES * MARGIN and z >= critical[t - 1]
                    if check and checked < 40:
                        checked += 1
                        assert new == max_drop_test(counts, MARGIN, level).fires, (b, c, t)
                else:
                    p = worse_p_value(counts)
                    old, new = p < ALPHA, p < level
                if old and first_before is None:
                    first_before = t
                if new and first_after is None:
                    first_after = t
        before.append(first_before)
        after.append(first_after)
    return before, after


def suite_table(rollouts: int, seed: int, check: bool) -> str:
    """Per-rollout firing (11 daily runs, suite + sampled suite) before and after."""
    lines = [
        "",
        f"Suite rules over {SUITE_RUNS} daily runs of {SUITE_CASES} cases plus a"
        f" {SUITE_CASES}-case sampled suite ({rollouts} rollouts per row; margin 1 point):",
        "",
        "| rule | churn | true drop | before: fires per rollout | after | before: median"
        " first run | after |",
        "|---|---|---|---|---|---|---|",
    ]
    for rule, churn, drop in SUITE_CELLS:
        before, after = suite_rollouts(rule, churn, drop, rollouts, seed, check)
        cells = []
        for runs in (before, after):
            hits = sum(r is not None for r in runs)
            low, high = wilson(hits, len(runs))
            cells.append(f"{hits / len(runs):.1%} ({low:.1%}-{high:.1%})")
        for runs in (before, after):
            median = median_delay([None if r is None else float(r) for r in runs])
            cells.append("never" if math.isinf(median) else f"{median:.0f}")
        lines.append(
            f"| {rule} | {churn:.0%} | {100 * drop:g} points | {cells[0]} | {cells[1]} |"
            f" {cells[2]} | {cells[3]} |"
        )
    return "\n".join(lines)


def parameters(args: argparse.Namespace) -> str:
    """The simulation parameters, printed above the tables."""
    return "\n".join(
        [
            "# Gate statistics benchmark",
            "",
            f"- {args.rollouts} rollouts per scenario, seed {args.seed}; steps 5% then 25%,"
            f" {STEP_SECONDS / 60:.0f} min each at 100 sessions/min, a tick every {TICK:.0f} s;"
            f" alpha = {ALPHA}, sequential share {SHARE}",
            f"- baselines {BASE}; sessions of 15 turns 20 s apart; counters scraped every 15 s"
            " on 2 canary and 3 stable replicas",
            f"- latency lognormal, median {LATENCY_MEDIAN} s, sigma {LATENCY_SIGMA}; target"
            f" {P95_TARGET:.2f} s, max_ratio {MAX_RATIO}",
            "- cells: A/A rows false-alarm rate per rollout; regression rows median canary"
            " sessions to the failure over all runs (share of runs detected)",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario and the suite cells, print the tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--suite-rollouts", type=int, default=4000)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--only", help="run only scenarios whose name contains this")
    parser.add_argument("--check", action="store_true", help="judge every tick, assert screens")
    args = parser.parse_args(argv)
    print(parameters(args))
    started = time.monotonic()
    chunk = max(1, min(50, args.rollouts // (4 * args.jobs) or 1))
    results = []
    with multiprocessing.Pool(args.jobs) as pool:
        for index, scenario in enumerate(SCENARIOS):
            if args.only and args.only not in scenario.name:
                continue
            tasks = [
                (index, first, min(chunk, args.rollouts - first), args.seed, args.check)
                for first in range(0, args.rollouts, chunk)
            ]
            outcomes: list[Outcome] = []
            for part in pool.imap(run_chunk, tasks):
                outcomes.extend(part)
            results.append((scenario, outcomes))
            print(
                f"  {scenario.name}: {time.monotonic() - started:.0f} s elapsed",
                file=sys.stderr,
                flush=True,
            )
    print(table(results))
    print(dispersion_table(results))
    print(suite_table(args.suite_rollouts, args.seed, args.check))
    print(f"\n{args.jobs} jobs, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
