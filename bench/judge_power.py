"""Power and false alarms of the reference-suite gate: faithfulness 0.891 vs 0.945 on 300 cases.

Simulated judged cases (numpy, seeded). Each case has a latent pair ``(z_stable, z_canary)``,
bivariate normal with correlation ``rho``: a case that is hard for one build tends to be hard
for the other (the judge sees the same question, context and reference). A latent value is
turned into a judged score through the score distribution's quantile function, so each pool's
mean score is exactly its faithfulness and ``rho`` sets how alike the two pools' per-case
scores are (the observed Pearson correlation of the scores is printed beside it). Two kinds of
judge:

- ``binary``: faithful (1) or not (0), as a yes/no judge answers;
- ``5-level``: a rubric on {0, 0.25, 0.5, 0.75, 1}, fully faithful with probability ``q``
  and otherwise uniform over the four lower levels, ``q`` chosen for the mean.

A/A: both pools at 0.945 (and at 0.891). Detection: stable 0.945 (Q8), canary 0.891 (Q4_K_M).
The gate is the ``at_least_baseline`` rule of ``rolloutd.evaluation.reference_gate``: the
one-sided paired t of ``rolloutd.core.stats.paired`` at the spent alpha of a gate with alpha
0.05: 0.0304 for the rollout's first run, 0.0012 for its fifth. For binary scores the table
also gives the tool-argument rule's exact McNemar test on the same pairs, the baseline the
continuous test is held against.

Run: ``python3 bench/judge_power.py [--runs 2000] [--cases 300] [--seed 7] [--output json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rolloutd.core.stats.paired import paired_score_test
from rolloutd.evaluation.statistics import pair, spent_alpha, worse_p_value

STABLE, CANARY = 0.945, 0.891
GATE_ALPHA = 0.05
LEVELS = np.array([0.0, 0.25, 0.5, 0.75])


def scores(u: np.ndarray, mean: float, kind: str) -> np.ndarray:
    """Judged scores with the given mean from uniform latent values ``u`` (monotone map)."""
    if kind == "binary":
        # Low latent values are the unfaithful answers.
        return (u >= 1.0 - mean).astype(float)
    top = (mean - LEVELS.mean()) / (1.0 - LEVELS.mean())
    below = np.minimum((u / (1.0 - top) * 4).astype(int), 3)
    return np.where(u >= 1.0 - top, 1.0, LEVELS[below])


def simulate(
    rng: np.random.Generator,
    *,
    kind: str,
    rho: float,
    stable: float,
    canary: float,
    cases: int,
    runs: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` pairs of runs: the stable and canary scores of the same ``cases`` cases, each
    an array of shape (runs, cases)."""
    x, y = rng.standard_normal((2, runs, cases))
    z_stable, z_canary = x, rho * x + np.sqrt(1.0 - rho * rho) * y
    return scores(ndtr(z_stable), stable, kind), scores(ndtr(z_canary), canary, kind)


def fire_rates(
    *, kind: str, rho: float, stable: float, canary: float, cases: int, runs: int, seed: int
) -> dict[str, float]:
    """Share of runs on which the gate fails the canary, at the first and the fifth run's alpha."""
    rng = np.random.default_rng(seed)
    first, fifth = spent_alpha(GATE_ALPHA, 1), spent_alpha(GATE_ALPHA, 5)
    fired = {"run 1": 0, "run 5": 0, "mcnemar run 1": 0}
    correlation = []
    bases, canaries = simulate(
        rng, kind=kind, rho=rho, stable=stable, canary=canary, cases=cases, runs=runs
    )
    for base, can in zip(bases, canaries, strict=True):
        test = paired_score_test(base.tolist(), can.tolist(), margin=0.0, alpha=first)
        fired["run 1"] += test.fires
        fired["run 5"] += test.fires and test.p_value <= fifth
        if kind == "binary":
            ids = [str(i) for i in range(cases)]
            counts = pair(
                dict(zip(ids, (base > 0.5).tolist(), strict=True)),
                dict(zip(ids, (can > 0.5).tolist(), strict=True)),
            )
            fired["mcnemar run 1"] += worse_p_value(counts) < first
        if base.std() > 0 and can.std() > 0:
            correlation.append(float(np.corrcoef(base, can)[0, 1]))
    rates = {key: count / runs for key, count in fired.items()}
    rates["score correlation"] = float(np.mean(correlation)) if correlation else float("nan")
    return rates


def main() -> None:
    """Print the table (or JSON) of false alarms and power."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000, help="simulated pairs of runs per row")
    parser.add_argument("--cases", type=int, default=300, help="cases per run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", choices=("table", "json"), default="table")
    args = parser.parse_args()
    rows = []
    for kind in ("binary", "5-level"):
        for rho in (0.0, 0.3, 0.6, 0.9):
            for label, stable, canary in (
                ("A/A 0.945", STABLE, STABLE),
                ("A/A 0.891", CANARY, CANARY),
                ("0.945 -> 0.891", STABLE, CANARY),
            ):
                rates = fire_rates(
                    kind=kind,
                    rho=rho,
                    stable=stable,
                    canary=canary,
                    cases=args.cases,
                    runs=args.runs,
                    seed=args.seed,
                )
                rows.append({"judge": kind, "rho": rho, "pools": label, **rates})
    if args.output == "json":
        print(json.dumps({"cases": args.cases, "runs": args.runs, "rows": rows}, indent=2))
        return
    print(
        f"{args.cases} cases, {args.runs} simulated pairs of runs per row; gate alpha "
        f"{GATE_ALPHA}: run 1 spends {spent_alpha(GATE_ALPHA, 1):.4f}, run 5 "
        f"{spent_alpha(GATE_ALPHA, 5):.4f}. 'fails' = share of runs the gate fails the canary "
        "(A/A: false alarms; 0.945 -> 0.891: power)."
    )
    header = (
        f"{'judge':8} {'rho':>4} {'corr':>5}  {'pools':15} {'fails run 1':>11} "
        f"{'fails run 5':>11} {'McNemar run 1':>13}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        mcnemar = f"{row['mcnemar run 1']:.4f}" if row["judge"] == "binary" else "-"
        print(
            f"{row['judge']:8} {row['rho']:4.1f} {row['score correlation']:5.2f}  "
            f"{row['pools']:15} {row['run 1']:11.4f} {row['run 5']:11.4f} {mcnemar:>13}"
        )


if __name__ == "__main__":
    main()
