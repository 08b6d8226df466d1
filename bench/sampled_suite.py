"""False failures and detection of a suite gate's *sampled* source over a month of daily runs,
and why its cases are replayed to stable as well as to the canary (numpy, seeded).

    python3 bench/sampled_suite.py [--rollouts 1000] [--days 30] [--jobs 2] [--seed 7]

Every day a rollout samples 300 cases from the day's captured traffic, as the sampler does
(``rolloutd.evaluation.sampling``: the stable pool's answer is the reference; the budget is
shared equally among the tools, a rare tool keeping all it has). Each case is replayed to a
stable and a canary replica, both are scored against the reference field by field, and the
gate's rule judges the canary run against the stable replay (*paired*) with ``judge_suite``'s
statistics, day ``t`` at ``spent_alpha(0.05, t)`` (a gate with only this source: one look):

- ``no_regression``: exact one-sided McNemar per field (``tool.argument``) and on whole calls,
  Holm across them;
- ``max_drop``: whole-call exactness more than 1 point below (Tango's score test, exact).

The *unpaired* alternative, the baseline of the ratios: the canary's replay alone against the
reference, judged against the reference's own accuracy (stable "exact" on its own answers),
by the same rules. It is what a source that did not replay to stable would judge.

Assumptions (a field is "bad" in a replay when the schema-aware scorer finds its value
different from the reference's; a difference of spelling only is not one):

- **Traffic**: 4,000 stable tool calls captured a day, Poisson per tool, over the simulated
  agent's five tools (``rolloutd.sim.cases``) in the shares of ``TOOL_SHARES`` (46%, 30%, 20%,
  3.5%, 0.5%): the rarest tool has about 20 calls a day, all of which the sampler keeps.
- **Wrong references**: 0% or 3% of the captured answers have one field wrong (the stable
  build erred when it answered the user); a replay that answers right differs from them there,
  on both pools alike.
- **Churn** (nondeterminism, such as batch-dependent numerics): each replay differs from the
  captured answer on one random field of a case with probability 0%, 2% or 5%, independently
  for each pool's replay and each case.
- **Regression** (the int4-like kind): the canary gets each *copied* field (record ids,
  amounts, dates) wrong with probability 1%, 2%, 5% or 10% wherever the field occurs; other
  fields are untouched.
- Days are independent samples. Every rule is judged alone, as if it were the gate's only one.

Verdicts are computed from the paired counts with the library's own functions
(``worse_p_value``, ``holm``, ``exact_drop_p_value``); the first failure of each rule in each
rollout, and every day of the first ``--check`` rollouts of each scenario, is judged again by
``judge_suite`` on ``RunSummary`` objects built as the gate's tests build them, and must agree.
"""

from __future__ import annotations

import argparse
import functools
import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

# Runs from a checkout without installing rolloutd.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import SuiteGate
from rolloutd.core.suite_outcomes import CaseOutcome
from rolloutd.evaluation.compare import CaseResult, FieldResult
from rolloutd.evaluation.gate import WHOLE_CALL, judge_suite
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.evaluation.sampling import _water_fill
from rolloutd.evaluation.statistics import (
    PairedCounts,
    exact_drop_p_value,
    holm,
    spent_alpha,
    worse_p_value,
)
from rolloutd.sim.cases import TOOLS

ALPHA = 0.05
MARGIN_POINTS = 1.0
CASES = 300
DAILY_CALLS = 4000
TOOL_SHARES = {
    "update_shipping_address": 0.46,
    "issue_refund": 0.30,
    "create_support_ticket": 0.20,
    "schedule_callback": 0.035,
    "transfer_funds": 0.005,
}
RULES = ("no_regression", "max_drop")
SOURCES = ("paired", "unpaired")
EARLY = 3  # the detection table's "by day 3" column
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)

TOOL_NAMES = tuple(TOOL_SHARES)
FIELDS = tuple(
    (tool, name) for tool in TOOL_NAMES for name in TOOLS[tool]["parameters"]["properties"]
)
FIELD_TOOL = np.array([TOOL_NAMES.index(tool) for tool, _ in FIELDS])
FIRST_FIELD = np.searchsorted(FIELD_TOOL, np.arange(len(TOOL_NAMES)))  # fields in tool order
WIDTH = np.bincount(FIELD_TOOL, minlength=len(TOOL_NAMES))
KEYS = tuple(f"{tool}.{name}" for tool, name in FIELDS)


def copied(schema: dict[str, object]) -> bool:
    """Whether a field's value is copied from the conversation: an amount, a date, a record id."""
    pattern = schema.get("pattern")
    return (
        schema.get("type") == "number"
        or schema.get("format") == "date"
        or (isinstance(pattern, str) and "[0-9]" in pattern)
    )


COPIED = np.array([copied(TOOLS[tool]["parameters"]["properties"][name]) for tool, name in FIELDS])


@dataclass(frozen=True)
class Scenario:
    """What both pools do, and whether it is an A/A rollout or one to detect."""

    name: str
    churn: float
    wrong_references: float
    regression: float = 0.0

    @property
    def aa(self) -> bool:
        """Both pools the same build."""
        return self.regression == 0.0


SCENARIOS = tuple(
    [Scenario("A/A", churn, wrong) for wrong in (0.0, 0.03) for churn in (0.0, 0.02, 0.05)]
    + [
        Scenario("copied fields wrong", churn, 0.03, regression)
        for churn in (0.02, 0.05)
        for regression in (0.01, 0.02, 0.05, 0.10)
    ]
)


@dataclass(frozen=True)
class Day:
    """One day's sample: each case's tool, and which fields each replay got wrong."""

    tools: np.ndarray
    stable_bad: np.ndarray
    canary_bad: np.ndarray


def draw_day(rng: np.random.Generator, scenario: Scenario) -> Day:
    """A day of captured traffic, sampled as the sampler samples it, replayed to both pools."""
    available = rng.poisson(DAILY_CALLS * np.array(list(TOOL_SHARES.values())))
    quota = _water_fill(dict(zip(TOOL_NAMES, (int(n) for n in available), strict=True)), CASES)
    tools = np.repeat(np.arange(len(TOOL_NAMES)), [quota[t] for t in TOOL_NAMES])
    cases = len(tools)

    def one_field(chance: float) -> np.ndarray:
        out = np.zeros((cases, len(FIELDS)), dtype=bool)
        hit = np.flatnonzero(rng.random(cases) < chance)
        column = FIRST_FIELD[tools[hit]] + (rng.random(len(hit)) * WIDTH[tools[hit]]).astype(int)
        out[hit, column] = True
        return out

    wrong_reference = one_field(scenario.wrong_references)
    stable_bad = wrong_reference | one_field(scenario.churn)
    canary_bad = wrong_reference | one_field(scenario.churn)
    if scenario.regression:
        present = FIELD_TOOL[None, :] == tools[:, None]
        drawn = rng.random((cases, len(FIELDS))) < scenario.regression
        canary_bad |= drawn & present & COPIED[None, :]
    return Day(tools, stable_bad, canary_bad)


# --- the rules, from the paired counts ------------------------------------------------------


@functools.cache
def _worse_p(worse: int, better: int) -> float:
    return worse_p_value(PairedCounts(0, worse, better, 0))


def _drop_fires(worse: int, better: int, cases: int, alpha: float) -> bool:
    # At most the margin observed, Tango's statistic is at most 0: its exact p-value is about
    # 1/2 or more, far above any alpha spent here (``--check`` holds it to judge_suite).
    if worse - better <= cases * MARGIN_POINTS / 100:
        return False
    return _drop_p(worse, better, cases) <= alpha


@functools.cache
def _drop_p(worse: int, better: int, cases: int) -> float:
    counts = PairedCounts(cases - worse - better, worse, better, 0)
    return exact_drop_p_value(counts, MARGIN_POINTS / 100)


def verdicts(day: Day, run: int, source: str) -> dict[str, bool]:
    """Whether each rule fails the canary on ``day``, the ``run``-th run of the rollout."""
    alpha = spent_alpha(ALPHA, run)
    baseline = day.stable_bad if source == "paired" else np.zeros_like(day.canary_bad)
    canary = day.canary_bad
    worse = (~baseline & canary).sum(axis=0)
    better = (baseline & ~canary).sum(axis=0)
    seen = np.bincount(day.tools, minlength=len(TOOL_NAMES))[FIELD_TOOL] > 0
    base_call, canary_call = baseline.any(axis=1), canary.any(axis=1)
    calls_worse = int((~base_call & canary_call).sum())
    calls_better = int((base_call & ~canary_call).sum())
    p_values = {WHOLE_CALL: _worse_p(calls_worse, calls_better)}
    for j in np.flatnonzero(seen):
        p_values[KEYS[j]] = _worse_p(int(worse[j]), int(better[j]))
    return {
        "no_regression": any(p < alpha for p in holm(p_values).values()),
        "max_drop": _drop_fires(calls_worse, calls_better, len(day.tools), alpha),
    }


# --- the same day as RunSummary objects, judged by judge_suite --------------------------------


def run_summary(role: RunRole, tools: np.ndarray, bad: np.ndarray) -> RunSummary:
    """A replay scored against the reference: every field right or a wrong value."""
    results = []
    for index, tool in enumerate(tools):
        name = TOOL_NAMES[tool]
        columns = range(FIRST_FIELD[tool], FIRST_FIELD[tool] + WIDTH[tool])
        fields = tuple(
            FieldResult(FIELDS[j][1], "wrong_value", True, False)
            if bad[index, j]
            else FieldResult(FIELDS[j][1], "correct", True, True)
            for j in columns
        )
        exact = not bad[index].any()
        outcome: CaseOutcome = "correct" if exact else "wrong_value"
        case = f"live-{index:04d}"
        results.append(CaseResult(case, outcome, name, exact, exact, True, fields, name))
    return RunSummary("capture", "d" * 64, f"http://{role}", role, tuple(results), NOW, NOW)


def judged(day: Day, run: int, source: str, rule: str) -> bool:
    """The verdict of ``judge_suite`` on the day's runs: whether the rule fails the canary."""
    spec = SuiteGate.model_validate(
        {
            "kind": "suite",
            "rule": rule,
            "alpha": ALPHA,
            "max_drop_points": MARGIN_POINTS,
            "sampled": {"capture": "/var/lib/rolloutd/capture"},
        }
    )
    # Unpaired, the baseline is the reference scored against itself: every case exact.
    stable = day.stable_bad if source == "paired" else np.zeros_like(day.canary_bad)
    baseline = run_summary("baseline", day.tools, stable)
    canary = run_summary("canary", day.tools, day.canary_bad)
    evaluation = judge_suite(spec, baseline, canary, name="live", role="step", now=NOW, run=run)
    return evaluation.verdict in (Verdict.FAIL, Verdict.BREACH)


# --- running ---------------------------------------------------------------------------------

Outcome = dict[str, int | None]
"""``<source>/<rule>`` -> the day (1-30) the rule first failed the canary, None: never."""


def rollout(scenario: Scenario, rng: np.random.Generator, days: int, check: bool) -> Outcome:
    """One rollout's daily runs until every rule has failed or the days are over; with
    ``check``, every day's verdicts are held to judge_suite's."""
    outcome: Outcome = {f"{s}/{r}": None for s in SOURCES for r in RULES}
    for run in range(1, days + 1):
        day = draw_day(rng, scenario)
        for source in SOURCES:
            for rule, fails in verdicts(day, run, source).items():
                key = f"{source}/{rule}"
                first = fails and outcome[key] is None
                if (check or first) and judged(day, run, source, rule) != fails:
                    raise AssertionError(f"judge_suite disagrees: {scenario}, day {run}, {key}")
                if first:
                    outcome[key] = run
        if not check and all(v is not None for v in outcome.values()):
            break
    return outcome


def run_chunk(task: tuple[int, int, int, int, int, int]) -> list[Outcome]:
    """A worker: ``count`` rollouts of one scenario, each seeded by its index."""
    index, first, count, days, seed, checked = task
    scenario = SCENARIOS[index]
    return [
        rollout(scenario, np.random.default_rng([seed, index, i]), days, i < checked)
        for i in range(first, first + count)
    ]


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval for a proportion."""
    z = 1.959963984540054
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


# --- tables ----------------------------------------------------------------------------------

Results = list[tuple[Scenario, list[Outcome]]]


def _rate(outcomes: list[Outcome], key: str) -> tuple[int, float, float]:
    hits = sum(o[key] is not None for o in outcomes)
    return hits, hits / len(outcomes), wilson(hits, len(outcomes))[1]


def _median_day(days: list[float]) -> str:
    if not days:
        return "-"
    value = statistics.median_low(sorted(days))
    return "never" if math.isinf(value) else f"{value:.0f}"


def aa_table(results: Results, days: int) -> str:
    """False failures per rollout of every A/A scenario, paired against unpaired."""
    lines = [
        "",
        f"A/A (both pools the same build): rollouts failed by the rule within {days} days"
        " (Wilson upper 95% bound); ratio = paired / unpaired:",
        "",
        "| churn | wrong refs | rule | paired | unpaired (baseline) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for scenario, outcomes in results:
        if not scenario.aa:
            continue
        for rule in RULES:
            _, paired, paired_upper = _rate(outcomes, f"paired/{rule}")
            _, unpaired, unpaired_upper = _rate(outcomes, f"unpaired/{rule}")
            ratio = f"{paired / unpaired:.3f}" if unpaired else "-"
            lines.append(
                f"| {scenario.churn:.0%} | {scenario.wrong_references:.0%} | {rule} |"
                f" {paired:.1%} ({paired_upper:.1%}) | {unpaired:.1%} ({unpaired_upper:.1%}) |"
                f" {ratio} |"
            )
    return "\n".join(lines)


def detection_table(results: Results, days: int) -> str:
    """Share of regressed rollouts failed within the days, and the day it happened."""
    lines = [
        "",
        f"Detection of copied fields (ids, amounts, dates) wrong on the canary, wrong refs 3%:"
        f" rollouts failed within {days} days (Wilson 95%) and by day {EARLY}; the median first"
        " failing day over all rollouts (a miss counting as never) and over those detected."
        " The unpaired rule fails A/A rollouts as often (above): its detection means nothing.",
        "",
        f"| copied fields wrong | churn | rule | paired: detected | by day {EARLY} | median day"
        " | median, detected | unpaired: detected | median day |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario, outcomes in results:
        if scenario.aa:
            continue
        for rule in RULES:
            cells = []
            for source in SOURCES:
                key = f"{source}/{rule}"
                found = [float(d) for o in outcomes if (d := o[key]) is not None]
                missed = [math.inf] * (len(outcomes) - len(found))
                low, high = wilson(len(found), len(outcomes))
                cells.append(f"{len(found) / len(outcomes):.1%} ({low:.1%}-{high:.1%})")
                if source == "paired":
                    early = sum(d <= EARLY for d in found) / len(outcomes)
                    cells.append(f"{early:.1%}")
                cells.append(_median_day(found + missed))
                if source == "paired":
                    cells.append(_median_day(found))
            scene = f"{scenario.regression:.0%} | {scenario.churn:.0%}"
            lines.append(f"| {scene} | {rule} | {' | '.join(cells)} |")
    return "\n".join(lines)


def goals_table(results: Results) -> str:
    """The A/A goal, each paired rule in its worst scenario: at most alpha per rollout."""
    lines = [
        "",
        f"Goal: A/A false failures per rollout <= {ALPHA:.0%} (met: the Wilson upper bound is"
        " within it too; unclear: only the rate is):",
        "",
        "| rule | worst scenario | rate (upper 95%) | met |",
        "|---|---|---|---|",
    ]
    aa = [(s, o) for s, o in results if s.aa]
    for rule in RULES:
        worst = max(aa, key=lambda item: _rate(item[1], f"paired/{rule}")[1])
        _, rate, upper = _rate(worst[1], f"paired/{rule}")
        met = "yes" if upper <= ALPHA else "unclear" if rate <= ALPHA else "no"
        name = f"churn {worst[0].churn:.0%}, wrong refs {worst[0].wrong_references:.0%}"
        lines.append(f"| {rule} (paired) | {name} | {rate:.1%} ({upper:.1%}) | {met} |")
    return "\n".join(lines)


def header(args: argparse.Namespace) -> str:
    """The parameters and assumptions, printed above the tables."""
    shares = ", ".join(f"{tool} {share:.1%}" for tool, share in TOOL_SHARES.items())
    return "\n".join(
        [
            "# Sampled suite: live traffic replayed to both pools",
            "",
            f"- {args.rollouts} rollouts a row, seed {args.seed}; {args.days} daily runs of"
            f" {CASES} cases sampled afresh from a day of {DAILY_CALLS:,} captured stable tool"
            f" calls ({shares}; the sampler shares the budget equally among tools)",
            f"- alpha {ALPHA} per rollout, day t spends {ALPHA} x 6/(pi^2 t^2); max_drop margin"
            f" {MARGIN_POINTS:g} point; paired = canary vs stable's replay of the same cases,"
            " unpaired = canary vs the reference taken as right",
            "- wrong references: one field of the captured answer wrong in 0% or 3% of cases,"
            " both replays then differ from it alike",
            "- churn: each replay (stable, canary) independently differs from the captured answer"
            " on one random field in 0%, 2% or 5% of cases",
            "- regression: the canary gets each copied field (ids, amounts, dates) wrong with the"
            " given probability wherever it occurs",
            f"- every day of the first {args.check} rollout(s) of each row, and every first"
            " failure, judged again by judge_suite (agreed)",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario, print the tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--check", type=int, default=2, help="rollouts a row judged by judge_suite every day"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    chunk = max(1, min(50, args.rollouts // (4 * args.jobs) or 1))
    results: Results = []
    with multiprocessing.Pool(args.jobs) as pool:
        for index, scenario in enumerate(SCENARIOS):
            tasks = [
                (index, first, min(chunk, args.rollouts - first), args.days, args.seed, args.check)
                for first in range(0, args.rollouts, chunk)
            ]
            outcomes: list[Outcome] = []
            for part in pool.imap(run_chunk, tasks):
                outcomes.extend(part)
            results.append((scenario, outcomes))
            print(
                f"  {scenario.name}, churn {scenario.churn:.0%}, wrong refs"
                f" {scenario.wrong_references:.0%}, regression {scenario.regression:.0%}:"
                f" {time.monotonic() - started:.0f} s elapsed",
                file=sys.stderr,
                flush=True,
            )
    print(header(args))
    print(goals_table(results))
    print(aa_table(results, args.days))
    print(detection_table(results, args.days))
    print(f"\n{args.jobs} jobs, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
