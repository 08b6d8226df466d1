"""False alarms and detection of the latency gate at matched load, on 1:1 and 3:1 fleets.

Each run is one canary step (``--hours`` long, judged every ``--every`` minutes) on a fleet
of one canary beside one or three stable replicas, from ``rolloutd.sim.loadcells``: stable's
load wanders between 0.5 and 10 requests in flight per replica, the canary carries the
planned share of it, time to first token grows 10% per request in flight, sessions differ
in prompt length, and vLLM's TTFT histogram edges bin it. Conditions: the same build (A/A)
and a canary 20% slower at every load (+20% TTFT).

Two judgements of the same cells, in the same run:

- ``matched``: ``compare_matched`` within the default load bands (what a latency gate with
  ``match_load`` does), max_ratio 1.0, alpha 0.025 (its half of the gate's 0.05);
- ``unmatched``: the same test with one band, i.e. canary against stable whatever load each
  carried (a latency gate without ``match_load`` and with ``min_load_ratio: 0``). With the
  default floor (0.7) that gate would pass nothing below a 41% weight on a 1:1 fleet.

Per fleet, weight and condition: the share of steps that failed (a false alarm under A/A,
a detection under +20%), passed (resolvable, not failed, at the end), or ended pending (too
few requests at matched load to resolve a x2 slow rate), and the median hours to the first
tick at which the gate could pass.

Run: ``python3 bench/matched_load.py [--trials 100] [--hours 4] [--jobs 2] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import print_results
from rolloutd.core.stats.matched import compare_matched
from rolloutd.sim.loadcells import Fleet, step_cells

ALPHA = 0.025
FLEETS = {"1:1": Fleet(canaries=1, stables=1), "3:1": Fleet(canaries=1, stables=3)}
CONDITIONS = {"A/A": 1.0, "+20% TTFT": 1.2}
METHODS = {"matched": None, "unmatched": (0.0, 1e9)}


@dataclass(frozen=True)
class Case:
    fleet: str
    weight: int
    condition: str
    method: str
    trials: int
    hours: float
    every_minutes: float
    seed: int


def run_case(case: Case) -> dict[str, object]:
    """Every trial of one case: how its steps ended."""
    fleet = replace(FLEETS[case.fleet], weight=case.weight)
    slices = round(case.hours * 3600 / fleet.slice_seconds)
    every = max(1, round(case.every_minutes * 60 / fleet.slice_seconds))
    bands = METHODS[case.method]
    failed = passed = pending = 0
    resolvable_at: list[float] = []
    for trial in range(case.trials):
        rng = random.Random(case.seed * 1_000_003 + trial)
        cells = step_cells(fleet, slices, rng, slowdown=CONDITIONS[case.condition])
        first = None
        outcome = "pending"
        for tick in range(every, slices + 1, every):
            flat = [cell for slice_cells in cells[:tick] for cell in slice_cells]
            kwargs = {"bands": bands} if bands else {}
            result = compare_matched([flat], max_ratio=1.0, alpha=ALPHA, **kwargs)
            if result.regressed:
                outcome = "failed"
                break
            if result.resolvable and first is None:
                first = tick * fleet.slice_seconds / 3600
            outcome = "passed" if result.resolvable else "pending"
        failed += outcome == "failed"
        passed += outcome == "passed"
        pending += outcome == "pending"
        if first is not None:
            resolvable_at.append(first)
    return {
        "fleet": case.fleet,
        "weight": case.weight,
        "condition": case.condition,
        "method": case.method,
        "trials": case.trials,
        "failed": failed / case.trials,
        "passed": passed / case.trials,
        "pending": pending / case.trials,
        "hours_to_resolvable": statistics.median(resolvable_at) if resolvable_at else None,
    }


def report(rows: list[dict[str, object]]) -> None:
    print(
        f"{'fleet':5} {'weight':>6} {'condition':10} {'method':10} {'failed':>7} "
        f"{'passed':>7} {'pending':>8} {'h to resolvable':>16}"
    )
    for row in rows:
        hours = row["hours_to_resolvable"]
        print(
            f"{row['fleet']:5} {row['weight']:>5}% {row['condition']:10} {row['method']:10} "
            f"{row['failed']:>7.1%} {row['passed']:>7.1%} {row['pending']:>8.1%} "
            f"{'never' if hours is None else f'{hours:.1f}':>16}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--hours", type=float, default=4.0, help="how long each step bakes")
    parser.add_argument("--every", type=float, default=4.0, help="minutes between ticks")
    parser.add_argument("--weights", default="5,25")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", choices=("table", "json"), default="table")
    args = parser.parse_args()
    cases = [
        Case(fleet, int(weight), condition, method, args.trials, args.hours, args.every, args.seed)
        for fleet in FLEETS
        for weight in args.weights.split(",")
        for condition in CONDITIONS
        for method in METHODS
    ]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(run_case, cases))
    print_results(rows, args.output, report)


if __name__ == "__main__":
    main()
