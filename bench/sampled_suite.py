"""The live-traffic suite rules over a month of daily runs: false failures and detection.

    python3 bench/sampled_suite.py [--rollouts 1000] [--days 30] [--jobs 2] [--seed 3]

Each day a rollout samples 300 captured cases, shared equally among five tools as the sampler
shares them (60 each), and replays them to a stable and a canary replica; each case's fields
are scored against the reference, stable's captured answer. The rules are judged as the gate
judges them, with the library's own statistics (``rolloutd.evaluation.statistics``), day *t*
at ``spent_alpha(0.05, t)``:

- ``no_regression``: per field (``tool.argument``) and for whole calls, exact one-sided McNemar
  on the discordant cases, Holm-adjusted, canary against stable's replay;
- ``max_drop``: whole-call exactness more than 1 point below stable's replay (Tango's score
  test, exact p-value);
- *unpaired* (the baseline): the canary's replay against the reference alone, taken as right
  (stable's own accuracy on its own answers), by the same ``max_drop`` test: what a rule that
  does not replay to stable would do.

What the simulated traffic assumes (a field is "bad" in a replay when it differs from the
reference):

- **Wrong references**: 3% of cases have one field wrong in the captured answer (the stable
  build erred when it answered the user): both replays differ from it there.
- **Churn** (nondeterminism: batch-dependent numerics, ties in sampling at temperature 0):
  each replay, and the captured answer, independently differs on one random field of a case
  with probability 0%, 2% or 5%.
- **A regression** of the int4-like kind: the canary gets each *copied* field (ids, amounts,
  dates, phone numbers) wrong with probability 2%, 5% or 10%; free fields are untouched.
- Days are independent samples; the A/A rows have no regression.

Printed: the share of rollouts in which each rule ever fails within the days (with its
Wilson upper 95% bound), and for the regressions the share detected and the median day of
detection (over the detected rollouts).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from rolloutd.evaluation.statistics import (
    PairedCounts,
    holm,
    max_drop_test,
    spent_alpha,
    worse_p_value,
)

ALPHA = 0.05
MARGIN = 0.01
CASES_PER_TOOL = 60
WRONG_REFERENCES = 0.03
# Per tool: its fields, True where the value is copied from the conversation.
TOOLS: dict[str, dict[str, bool]] = {
    "issue_refund": {"order_id": True, "amount": True, "reason": False},
    "transfer_funds": {"from_account": True, "to_account": True, "amount": True, "date": True},
    "update_shipping_address": {"order_id": True, "street": False, "city": False, "zip": True},
    "schedule_callback": {"phone": True, "date": True, "time_window": False},
    "create_support_ticket": {"customer_id": True, "priority": False, "summary": False},
}


@dataclass(frozen=True)
class Scenario:
    name: str
    churn: float
    regression: float


def _flip_one(rng: np.random.Generator, cases: int, fields: int, chance: float) -> np.ndarray:
    """Cases x fields: one random field of each case differs, with ``chance`` per case."""
    out = np.zeros((cases, fields), dtype=bool)
    hit = rng.random(cases) < chance
    out[np.flatnonzero(hit), rng.integers(0, fields, hit.sum())] = True
    return out


def _day(rng: np.random.Generator, scenario: Scenario, day: int) -> dict[str, bool]:
    """One day's verdicts: whether each rule fails today."""
    alpha = spent_alpha(ALPHA, day)
    p_values: dict[str, float] = {}
    stable_calls: list[np.ndarray] = []
    canary_calls: list[np.ndarray] = []
    for tool, fields in TOOLS.items():
        width = len(fields)
        copied = np.array(list(fields.values()))
        reference = _flip_one(rng, CASES_PER_TOOL, width, WRONG_REFERENCES + scenario.churn)
        stable = reference | _flip_one(rng, CASES_PER_TOOL, width, scenario.churn)
        canary = reference | _flip_one(rng, CASES_PER_TOOL, width, scenario.churn)
        if scenario.regression:
            canary |= (rng.random((CASES_PER_TOOL, width)) < scenario.regression) & copied
        for j, field in enumerate(fields):
            s_bad, c_bad = stable[:, j], canary[:, j]
            p_values[f"{tool}.{field}"] = worse_p_value(_paired(s_bad, c_bad))
        stable_calls.append(stable.any(axis=1))
        canary_calls.append(canary.any(axis=1))
    s_call, c_call = np.concatenate(stable_calls), np.concatenate(canary_calls)
    calls = _paired(s_call, c_call)
    p_values["(whole call)"] = worse_p_value(calls)
    regressed = any(p < alpha for p in holm(p_values).values())
    unpaired = PairedCounts(int((~c_call).sum()), int(c_call.sum()), 0, 0)
    return {
        "no_regression": regressed,
        "max_drop": max_drop_test(calls, MARGIN, alpha).fires,
        "unpaired": max_drop_test(unpaired, MARGIN, alpha).fires,
    }


def _paired(stable_bad: np.ndarray, canary_bad: np.ndarray) -> PairedCounts:
    return PairedCounts(
        both_good=int((~stable_bad & ~canary_bad).sum()),
        canary_worse=int((~stable_bad & canary_bad).sum()),
        canary_better=int((stable_bad & ~canary_bad).sum()),
        both_bad=int((stable_bad & canary_bad).sum()),
    )


def _rollouts(args: tuple[Scenario, int, int, int]) -> list[dict[str, int | None]]:
    """The first failing day of each rule (None: never) in each of ``count`` rollouts."""
    scenario, count, days, seed = args
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(count):
        first: dict[str, int | None] = {"no_regression": None, "max_drop": None, "unpaired": None}
        for day in range(1, days + 1):
            for rule, fails in _day(rng, scenario, day).items():
                if fails and first[rule] is None:
                    first[rule] = day
            if all(v is not None for v in first.values()):
                break
        found.append(first)
    return found


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    scenarios = [
        Scenario("A/A, no churn", 0.0, 0.0),
        Scenario("A/A, churn 2%", 0.02, 0.0),
        Scenario("A/A, churn 5%", 0.05, 0.0),
        Scenario("copied fields 2% wrong, churn 2%", 0.02, 0.02),
        Scenario("copied fields 5% wrong, churn 2%", 0.02, 0.05),
        Scenario("copied fields 10% wrong, churn 2%", 0.02, 0.10),
    ]
    started = time.perf_counter()
    chunks = max(1, args.jobs * 4)
    work = [
        (
            s,
            args.rollouts // chunks + (1 if k < args.rollouts % chunks else 0),
            args.days,
            args.seed * 1000 + i * 100 + k,
        )
        for i, s in enumerate(scenarios)
        for k in range(chunks)
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_rollouts, work))
    by_scenario: dict[str, list[dict[str, int | None]]] = {}
    for (scenario, *_), found in zip(work, results, strict=True):
        by_scenario.setdefault(scenario.name, []).extend(found)
    print(
        f"{args.rollouts} rollouts a row, {args.days} daily runs of {CASES_PER_TOOL * len(TOOLS)} "
        f"sampled cases ({CASES_PER_TOOL} per tool, {len(TOOLS)} tools), alpha {ALPHA} per "
        f"rollout spent 6/(pi^2 t^2); wrong references {WRONG_REFERENCES:.0%}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    print()
    print("| scenario | rule | failed within the days (upper 95%) | median day of detection |")
    print("|---|---|---|---|")
    for scenario in scenarios:
        found = by_scenario[scenario.name]
        for rule in ("no_regression", "max_drop", "unpaired"):
            days = [f[rule] for f in found if f[rule] is not None]
            share = len(days) / len(found)
            upper = wilson_upper(len(days), len(found))
            median = f"{statistics.median(days):g}" if days else "never"
            print(
                f"| {scenario.name} | {rule} | {share:.1%} ({upper:.1%}) | "
                f"{median if scenario.regression else '-'} |"
            )


if __name__ == "__main__":
    main()
