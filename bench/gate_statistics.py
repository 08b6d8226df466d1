"""False alarms, detection delays and passes of rolloutd's rate and latency gates on realistic
agent traffic, as Prometheus reports it (numpy, seeded), held against the goals they must meet.

Every rollout runs two steps, 5% then 25% of sessions, 100 minutes each at 100 sessions a
minute (10,000 sessions a step), with a tick every 30 s. The traffic (``bench/traffic.py``)
is sessions of 15 turns counted by Prometheus-like counters: per-replica series scraped every
15 s and read with ``increase()``'s reset handling and extrapolation. Conditions, alone and
all at once: independent requests; sessions whose turns share a timeout and schema-violation
probability (intra-session correlation 0.02 and 0.1); load swinging +-30% a minute on both
pools, with the second step 30% busier; a canary share of 4.3% for a planned 5% (21.5% for
25%); a canary replica restarting mid-step (its counters reset); scrape gaps (2% of scrapes
lost and a 3-minute gap on a canary target).

The gates, each judged as the compare gate judges it (``compare_rates`` and its
``RateOutcome``: the every-tick test at 20% of alpha, a pass at the 5% step's end, the
final look at the end of the 25% step with the rest):

- ``timeouts`` and ``schema``: per request (per tool call), with the dispersion estimated
  from the steps' blocks (the signals an engine exports, which know no sessions);
- ``session timeouts`` and ``session schema``: sessions with at least one timeout or schema
  violation per session started (the agent gateway's once-per-session series): one trial a
  session, so nothing is estimated;
- ``escalation``: sessions handed to a human, once per session;
- ``latency``: the latency gate (p95 bounds at alpha/2, the slow-request rate test at
  alpha/2).

The canary without traffic drives the real gate path (``evaluate_gate`` on the reference
plan's escalation gate, over this traffic) tick by tick and counts the inconclusive
evaluations in a row until the reference plan's ``max_inconclusive`` is passed.

Ticks where the largest likelihood ratio is below the every-tick test's threshold are
skipped (no mixture can reject there, whatever the dispersion); ``--check`` judges every
tick and asserts the screen. Delays are canary sessions when the gate fails, the median over
all runs with a miss counting as never.

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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
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
from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.core.stats.rates import compare_rates
from rolloutd.core.stats.sequential import Segment, beta_binomial_log_bf, rate_ratio_test
from rolloutd.core.stats.stratified import Tally, block_count, blocks_from_cuts
from rolloutd.evaluation.statistics import (
    PairedCounts,
    exact_critical_z,
    max_drop_test,
    score_statistic,
    spent_alpha,
    worse_p_value,
)
from rolloutd.gates.base import Judging, Measurement, Pool
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.planfile import load_plan

ALPHA = 0.05
SHARE = 0.2  # the compare gate's default sequential_share
Z_ONE_SIDED = NormalDist().inv_cdf(1 - ALPHA)
BASELINE_P95 = LATENCY_MEDIAN * math.exp(LATENCY_SIGMA * Z_ONE_SIDED)
P95_TARGET = 1.15 * BASELINE_P95
MAX_RATIO = 1.10
BOUND_LIST = [float(b) for b in BOUNDS]
BLOCK = 300.0  # a compare gate's default window: its shortest block
# As the gate decides by default (``comparisons.clustered``): per-request signals cluster.
CLUSTERED = {
    "timeouts": True,
    "schema": True,
    "session timeouts": False,
    "session schema": False,
    "escalation": False,
}
GATES = (*SIGNALS, "latency")
REFERENCE_PLAN = Path(__file__).resolve().parent.parent / "config/plans/atlas-70b-maxseq8192.yaml"

INDEPENDENT = Conditions("independent requests")
CLUSTERED_SESSIONS = Conditions("sessions, ICC 0.1", icc=0.1)
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
    CLUSTERED_SESSIONS,
    Conditions("load +-30%/min, step 2 x1.3", load_swing=0.3, busier_second_step=1.3),
    Conditions("canary share 4.3% for 5%", share_factor=0.86),
    Conditions("a canary replica restarts", restart=True),
    Conditions("scrape gaps", gaps=True),
    EVERYTHING,
)
RATE_GATES = ("timeouts", "schema", "session timeouts", "session schema")
TIMEOUT_GATES = ("timeouts", "session timeouts")
SCHEMA_GATES = ("schema", "session schema")


@dataclass(frozen=True)
class Scenario:
    """Traffic conditions, what the canary and stable do, and the gates it is judged on."""

    name: str
    conditions: Conditions
    canary: Canary
    kind: str  # "aa" (false alarms), "detect" (delays), "clean" (passes), "silent" (no traffic)
    gates: tuple[str, ...] = GATES
    base: dict[str, float] = field(default_factory=dict)


def _family(
    name: str, canary: Canary, kind: str, gates: tuple[str, ...], **base: float
) -> list[Scenario]:
    return [
        Scenario(f"{name}, {c.name}", c, canary, kind, gates, dict(base))
        for c in (INDEPENDENT, CLUSTERED_SESSIONS, EVERYTHING)
    ]


SCENARIOS = tuple(
    [Scenario(f"A/A, {c.name}", c, Canary(), "aa") for c in CONDITIONS]
    + _family("clean canary", Canary(timeouts=0.0, schema=0.0), "clean", RATE_GATES)
    + _family(
        "stable 0%, canary 1% timeouts",
        Canary(timeouts=0.01),
        "detect",
        TIMEOUT_GATES,
        timeouts=0.0,
    )
    + _family("timeouts 1%->5%", Canary(timeouts=0.05), "detect", TIMEOUT_GATES)
    + _family("schema 0.3%->1%", Canary(schema=0.01), "detect", SCHEMA_GATES)
    + [
        Scenario(
            f"escalation 5%->6%, {c.name}", c, Canary(escalation=0.06), "detect", ("escalation",)
        )
        for c in (INDEPENDENT, EVERYTHING)
    ]
    + [
        Scenario(f"p95 +20%, {c.name}", c, Canary(latency_scale=1.2), "detect", ("latency",))
        for c in (INDEPENDENT, EVERYTHING)
    ]
    + [
        Scenario(
            "canary receives no traffic at 5%",
            Conditions("no canary traffic", share_factor=0.0),
            Canary(),
            "silent",
            ("escalation",),
        )
    ]
)

Outcome = dict[str, float | None]
"""``<gate>/fail`` -> canary sessions when the gate failed (None: never); ``<gate>/pass5``
and ``<gate>/pass25`` -> 1.0 when it passed at the end of that step; ``dispersion/<gate>``
-> the dispersion the final look used; ``silent/paused`` -> seconds from the step's start
to the evaluation that passed the inconclusive limit, ``silent/router`` -> 1.0 when its
reason named the router."""


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
    """Every tick of one rollout for one compare gate carried by both steps: when it fails,
    whether it passed at the 5% step's end, and its final look at the 25% step's end."""
    windows = Windows(traffic, signal)
    ticks, whole = windows.ticks, windows.whole
    end_of_first = int(np.searchsorted(ticks, STEP_SECONDS))
    last = len(ticks) - 1
    first = as_tally(whole[end_of_first]) if usable(whole[end_of_first]) else None
    first_blocks = windows.blocks(end_of_first) if first is not None else []
    outcome: Outcome = {f"{signal}/fail": None, f"{signal}/pass5": None, f"{signal}/pass25": None}
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
        step_end = i in (end_of_first, last)
        if bound < threshold and not check and not step_end:
            continue
        step_blocks = [first_blocks, windows.blocks(i)] if later else [windows.blocks(i)]
        result = compare_rates(
            step_blocks,
            alpha=ALPHA,
            sequential_share=SHARE,
            clustered=CLUSTERED[signal],
            looks=later,
            final=step_blocks if i == last else None,
        )
        assert not (result.sequential.reject and bound < threshold), "GLR screen is not a bound"
        verdict = result.outcome(bake_over=step_end).verdict
        if verdict is Verdict.FAIL:
            outcome[f"{signal}/fail"] = float(traffic.canary_sessions(t))
            outcome[f"{signal}/final"] = float(not result.sequential.reject)
            return outcome
        if step_end:
            outcome[f"{signal}/pass5" if i == end_of_first else f"{signal}/pass25"] = float(
                verdict is Verdict.PASS
            )
        if i == last and result.final is not None:
            outcome[f"dispersion/{signal}"] = result.final.dispersion.phi
    return outcome


# --- a canary that receives nothing, on the real gate path -------------------------------------


@dataclass
class TrafficSource:
    """The simulated counters as a metrics source: what Prometheus would answer for a
    window (``increase()`` per series, summed per pool, stale is an error)."""

    traffic: Traffic
    start: datetime

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """Events and exposure of ``signal`` on ``pool`` over ``window`` ending at ``now``."""
        from rolloutd.gates.base import MeasurementError

        end = (now - self.start).total_seconds()
        events, exposure = SIGNALS[_SIGNAL_OF[signal]]
        start = np.array([end - window.total_seconds()])
        value = self.traffic.counts(events, pool, start, np.array([end]))[0]
        samples = self.traffic.counts(exposure, pool, start, np.array([end]))[0]
        if not (np.isfinite(value) and np.isfinite(samples)):
            raise MeasurementError(f"no fresh samples of {signal} from the {pool} pool")
        return Measurement(float(value), int(samples), f"bench:{signal}:{pool}")


_SIGNAL_OF = {"escalations": "escalation"}


_PLAN: list[Plan] = []  # the reference plan, read once before the workers start


def judge_silent(traffic: Traffic) -> Outcome:
    """The reference plan's escalation gate at every step-gate tick of a 5% step whose canary
    receives nothing: when the inconclusive evaluations in a row pass the plan's limit (the
    state machine pauses the rollout then), and whether the reason names the router."""
    if not _PLAN:
        _PLAN.append(load_plan(REFERENCE_PLAN).plan)
    plan = _PLAN[0]
    name = "escalations_not_rising"
    spec = plan.gates[name]
    limit = plan.limits.max_inconclusive
    start = datetime(2026, 1, 1, tzinfo=UTC)
    source = TrafficSource(traffic, start)
    interval = plan.interval.total_seconds()
    in_a_row = 0
    outcome: Outcome = {"silent/paused": None, "silent/router": None}
    for tick in np.arange(interval, STEP_SECONDS, interval):
        now = start + timedelta(seconds=float(tick))
        judging = Judging(name, "step", source, now, plan, start, 5)
        evaluation = evaluate_gate(spec, judging)
        in_a_row = in_a_row + 1 if evaluation.verdict is Verdict.INCONCLUSIVE else 0
        if in_a_row > limit:
            outcome["silent/paused"] = float(tick)
            outcome["silent/router"] = float(
                "does the router apply the weight" in evaluation.reason
            )
            break
    return outcome


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
    outcome: Outcome = {"latency/fail": None}
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
            outcome["latency/fail"] = float(traffic.canary_sessions(t))
            break
    return outcome


# --- running ---------------------------------------------------------------------------------


# --- running ---------------------------------------------------------------------------------


def run_chunk(task: tuple[int, int, int, int, bool]) -> list[Outcome]:
    """A worker: ``count`` rollouts of one scenario, each seeded by its index."""
    scenario_index, first, count, seed, check = task
    scenario = SCENARIOS[scenario_index]
    outcomes = []
    for i in range(first, first + count):
        rng = np.random.default_rng([seed, scenario_index, i])
        traffic = simulate(scenario.conditions, scenario.canary, rng, scenario.base)
        outcome: Outcome = {}
        if scenario.kind == "silent":
            outcome.update(judge_silent(traffic))
        else:
            for gate in scenario.gates:
                if gate == "latency":
                    outcome.update(judge_latency(traffic))
                else:
                    outcome.update(judge_rates(traffic, gate, check and i < first + 2))
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


Results = list[tuple[Scenario, list[Outcome]]]


def false_alarms(outcomes: list[Outcome], gate: str) -> tuple[float, float]:
    """A gate's false-alarm rate over A/A rollouts and its Wilson upper 95% bound."""
    hits = sum(o.get(f"{gate}/fail") is not None for o in outcomes)
    return hits / len(outcomes), wilson(hits, len(outcomes))[1]


def detection(outcomes: list[Outcome], gate: str) -> tuple[float, float]:
    """Median canary sessions to the failure (a miss: never) and the share detected."""
    delays = [o.get(f"{gate}/fail") for o in outcomes]
    return median_delay(delays), sum(d is not None for d in delays) / len(delays)


def passes(outcomes: list[Outcome], gate: str) -> tuple[float, float]:
    """Shares of rollouts whose gate passed at the end of the 5% and of the 25% step."""
    n = len(outcomes)
    return (
        sum(o.get(f"{gate}/pass5") == 1.0 for o in outcomes) / n,
        sum(o.get(f"{gate}/pass25") == 1.0 for o in outcomes) / n,
    )


def _sessions(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:,.0f}"


def aa_rows(
    results: Results, title: str, columns: Sequence[str], cell: Callable[[list[Outcome], str], str]
) -> str:
    """A table with a row per A/A scenario and a ``cell`` per column."""
    lines = ["", title, "", "| scenario | " + " | ".join(columns) + " |"]
    lines.append("|---|" + "---|" * len(columns))
    for scenario, outcomes in results:
        if scenario.kind == "aa":
            cells = [cell(outcomes, column) for column in columns]
            lines.append(f"| {scenario.name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _false_alarm_cell(outcomes: list[Outcome], gate: str) -> str:
    rate, upper = false_alarms(outcomes, gate)
    final = sum(o.get(f"{gate}/final") == 1.0 for o in outcomes) / len(outcomes)
    return f"{rate:.1%} ({upper:.1%}; final {final:.1%})"


def aa_table(results: Results) -> str:
    """False alarms per rollout (upper 95% bound) of every gate in every A/A scenario."""
    title = "A/A: false alarms per rollout (Wilson upper 95% bound); goal <= 5%, bound <= 7.5%:"
    return aa_rows(results, title, GATES, _false_alarm_cell)


def detail_table(results: Results) -> str:
    """Every other scenario, gate by gate."""
    lines = [
        "",
        "Regressions, clean canaries and a silent canary, gate by gate (median canary sessions"
        " to the failure over all runs, a miss counting as never; share detected; share passed"
        " at the end of the 5% and of the 25% step):",
        "",
        "| scenario | gate | median sessions to fail | detected | passed at 5% end | at 25% end |",
        "|---|---|---|---|---|---|",
    ]
    for scenario, outcomes in results:
        if scenario.kind == "aa":
            continue
        if scenario.kind == "silent":
            paused = [o["silent/paused"] for o in outcomes if o.get("silent/paused") is not None]
            router = sum(o.get("silent/router") == 1.0 for o in outcomes)
            shown = f"{max(paused) / 60:.1f} min at most" if paused else "never"
            lines.append(
                f"| {scenario.name} | escalation | paused after {shown} | "
                f"{len(paused) / len(outcomes):.0%} | reason names the router in "
                f"{router / len(outcomes):.0%} | - |"
            )
            continue
        for gate in scenario.gates:
            median, share = detection(outcomes, gate)
            five, twenty_five = passes(outcomes, gate)
            lines.append(
                f"| {scenario.name} | {gate} | {_sessions(median)} | {share:.1%} | "
                f"{five:.1%} | {twenty_five:.1%} |"
            )
    return "\n".join(lines)


def _find(results: Results, prefix: str) -> list[tuple[Scenario, list[Outcome]]]:
    return [(s, o) for s, o in results if s.name.startswith(prefix)]


def goals_table(results: Results) -> str:
    """The goals, each with the figure measured in this run and whether it is met."""
    rows: list[tuple[str, str, str, bool]] = []
    aa = [(s, o) for s, o in results if s.kind == "aa"]
    if aa:
        worst = max(
            ((false_alarms(o, g), s.name, g) for s, o in aa for g in GATES), key=lambda x: x[0]
        )
        (rate, upper), name, gate = worst
        rows.append(
            (
                "A/A, every scenario",
                "<= 5%, upper 95% bound <= 7.5%",
                f"worst {rate:.1%} (bound {upper:.1%}): {gate}, {name}",
                rate <= ALPHA and upper <= 1.5 * ALPHA,
            )
        )
    for s, o in _find(results, "clean canary"):
        for gate in s.gates:
            five, twenty_five = passes(o, gate)
            rows.append(
                (
                    f"{s.name}: {gate}",
                    "passes by each step's end in >= 95%",
                    f"5% step {five:.1%}, 25% step {twenty_five:.1%}",
                    min(five, twenty_five) >= 0.95,
                )
            )
    for prefix, gates, median_goal, share_goal in (
        ("stable 0%, canary 1% timeouts", TIMEOUT_GATES, 400, 0.0),
        ("timeouts 1%->5%", TIMEOUT_GATES, 150, 0.99),
        ("schema 0.3%->1%", SCHEMA_GATES, 250, 0.95),
    ):
        for s, o in _find(results, prefix):
            for gate in gates:
                median, share = detection(o, gate)
                goal = f"median <= {median_goal}" + (f", >= {share_goal:.0%}" if share_goal else "")
                rows.append(
                    (
                        f"{s.name}: {gate}",
                        goal,
                        f"{_sessions(median)} ({share:.1%})",
                        median <= median_goal and share >= share_goal,
                    )
                )
    for s, o in _find(results, "escalation 5%->6%"):
        _, share = detection(o, "escalation")
        rows.append((s.name, ">= 80% by the end of the 25% step", f"{share:.1%}", share >= 0.8))
    for s, o in _find(results, "canary receives no traffic"):
        paused = [x["silent/paused"] for x in o if x.get("silent/paused") is not None]
        router = sum(x.get("silent/router") == 1.0 for x in o)
        plan = _PLAN[0]
        limit = plan.limits.max_inconclusive
        # The gate's window, then the evaluations that pass the limit ("more than" it).
        window = 300 + (limit + 1) * plan.interval.total_seconds()
        worst = max(paused) if paused else math.inf
        rows.append(
            (
                s.name,
                f"paused within the gate's window + {limit + 1} step-gate ticks "
                f"({window / 60:g} min), reason names the router",
                f"paused in {len(paused) / len(o):.0%}, at most {worst / 60:.1f} min; router "
                f"named in {router / len(o):.0%}",
                len(paused) == len(o) and worst <= window and router == len(o),
            )
        )
    lines = [
        "",
        "Goals:",
        "",
        "| scenario | goal | measured | met |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {'yes' if ok else 'no'} |" for a, b, c, ok in rows]
    return "\n".join(lines)


def _dispersion_cell(outcomes: list[Outcome], signal: str) -> str:
    values = sorted(v for o in outcomes if (v := o.get(f"dispersion/{signal}")) is not None)
    if not values:
        return "-"
    n = len(values)
    return f"{values[n // 2]:.2f} ({values[n // 10]:.2f}-{values[9 * n // 10]:.2f})"


def dispersion_table(results: Results) -> str:
    """The dispersion the final look used at the horizon (median over rollouts)."""
    title = (
        "Dispersion used by the final look of the per-request gates (median, 10th-90th percentile):"
    )
    return aa_rows(results, title, [g for g in SIGNALS if CLUSTERED[g]], _dispersion_cell)


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
    parser.add_argument("--no-suite", action="store_true", help="leave out the suite rules")
    args = parser.parse_args(argv)
    print(parameters(args))
    started = time.monotonic()
    _PLAN.append(load_plan(REFERENCE_PLAN).plan)
    chunk = max(1, min(50, args.rollouts // (4 * args.jobs) or 1))
    results: Results = []
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
    print(goals_table(results))
    print(aa_table(results))
    print(detail_table(results))
    print(dispersion_table(results))
    if not args.no_suite:
        print(suite_table(args.suite_rollouts, args.seed, args.check))
    print(f"\n{args.jobs} jobs, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
