"""Alpha spent across a rollout's suite runs, and the exact max-drop test each run uses."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
import pytest

from rolloutd.core.actions import Verdict
from rolloutd.evaluation import records
from rolloutd.evaluation.gate import judge_suite
from rolloutd.evaluation.schedule import judge_stored
from rolloutd.evaluation.statistics import (
    PairedCounts,
    exact_critical_z,
    exact_drop_p_value,
    max_drop_fire_probability,
    max_drop_test,
    score_statistic,
    spent_alpha,
    worse_p_value,
)
from tests.evaluation.test_gate import NOW, gate, run
from tests.store.seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle

CASES, MARGIN, ALPHA, RUNS, LOOKS = 300, 0.01, 0.05, 11, 2


def test_the_schedule_spends_at_most_alpha_over_any_number_of_runs() -> None:
    """6 / (pi^2 t^2) sums to 1 over all t: any prefix spends less than alpha; a run's share
    is split over its suites."""
    assert sum(spent_alpha(ALPHA, t) for t in range(1, 100_000)) < ALPHA
    assert spent_alpha(ALPHA, 1) == pytest.approx(ALPHA * 6 / math.pi**2)
    assert spent_alpha(ALPHA, 3, looks=2) == pytest.approx(spent_alpha(ALPHA, 3) / 2)
    with pytest.raises(ValueError, match="count from 1"):
        spent_alpha(ALPHA, 0)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.05, spent_alpha(ALPHA, 1, LOOKS), spent_alpha(ALPHA, 4)])
def test_the_exact_max_drop_test_fires_at_most_alpha_at_the_margin(alpha: float) -> None:
    """Summed over every outcome, at a drop of exactly the margin and any churn, the rule
    fires at most alpha of the time (the normal approximation reached 1.8 alpha at 300
    cases); its p-value is at most alpha exactly where Z reaches the critical value."""
    for churn in (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3):
        fired = max_drop_fire_probability(
            CASES, margin=MARGIN, alpha=alpha, churn=churn, drop=MARGIN
        )
        assert fired <= alpha * 1.001, (churn, fired)
    critical = exact_critical_z(CASES, MARGIN, alpha)
    normal = NormalDist().inv_cdf(1 - alpha)
    assert critical > normal  # the exact test needs more than the normal approximation
    for b, c in ((8, 0), (12, 3), (20, 6), (30, 12)):
        counts = PairedCounts(CASES - b - c, b, c, 0)
        z = score_statistic(counts, MARGIN)
        assert (exact_drop_p_value(counts, MARGIN) <= alpha) == (z >= critical)


def _first_firing(fires: np.ndarray) -> np.ndarray:
    """Per rollout, whether any of its runs fired."""
    return fires.reshape(len(fires), -1).any(axis=1)


@pytest.mark.slow
def test_eleven_daily_runs_with_a_sampled_suite_fire_at_most_alpha_per_rollout() -> None:
    """4,000 simulated rollouts, each with 11 daily runs of the suite and of a sampled suite
    whose noise is drawn afresh every run (the worst case for a union bound): with the drop
    exactly at the margin (and churn 2%, where the rule fires most), max_drop fires in at
    most alpha of the rollouts, as does at_least_baseline with no drop; judging every run at
    alpha fired far more."""
    rng = np.random.default_rng(11)
    rollouts = 4000
    levels = [spent_alpha(ALPHA, t, LOOKS) for t in range(1, RUNS + 1)]
    critical = [exact_critical_z(CASES, MARGIN, level) for level in levels]
    normal = NormalDist().inv_cdf(1 - ALPHA)
    for rule, churn, drop in (("max_drop", 0.02, MARGIN), ("at_least_baseline", 0.05, 0.0)):
        worse, better = churn / 2 + drop, churn / 2
        draws = rng.multinomial(
            CASES, [worse, better, 1 - worse - better], size=(rollouts, RUNS, LOOKS)
        )
        spent = np.zeros((rollouts, RUNS, LOOKS), dtype=bool)
        every = np.zeros((rollouts, RUNS, LOOKS), dtype=bool)
        for index in np.ndindex(rollouts, RUNS, LOOKS):
            b, c = int(draws[index][0]), int(draws[index][1])
            counts = PairedCounts(CASES - b - c, b, c, 0)
            if rule == "max_drop":
                z = score_statistic(counts, MARGIN)
                spent[index] = b - c > CASES * MARGIN and z >= critical[index[1]]
                every[index] = z > normal
            else:
                p = worse_p_value(counts)
                spent[index], every[index] = p < levels[index[1]], p < ALPHA
        rate = _first_firing(spent).mean()
        error = math.sqrt(ALPHA * (1 - ALPHA) / rollouts)
        assert rate <= ALPHA + 2.33 * error, (rule, rate)
        assert _first_firing(every).mean() > 4 * ALPHA, rule


def test_a_later_run_is_judged_at_its_smaller_share_of_alpha() -> None:
    """The same 5-point drop breaches at the first run and not at the fortieth, and the
    evidence says which run it was and what it spent."""
    baseline, canary = run("baseline"), run("canary", wrong={"pay.amount": 15})
    first = judge_suite(
        gate("max_drop"), baseline, canary, name="drop", role="trigger", now=NOW, run=1, looks=2
    )
    late = judge_suite(
        gate("max_drop"), baseline, canary, name="drop", role="trigger", now=NOW, run=40, looks=2
    )
    assert first.verdict is Verdict.BREACH
    assert late.verdict is Verdict.PASS
    spending = late.evidence["alpha_spending"]
    assert spending["run"] == 40 and spending["looks"] == 2 and spending["gate_alpha"] == 0.05
    assert late.evidence["alpha"] == pytest.approx(spent_alpha(0.05, 40, 2))
    assert late.evidence["max_drop"]["p_value"] > late.evidence["alpha"]
    assert max_drop_test(PairedCounts(285, 15, 0, 0), MARGIN, 0.05).fires


def test_runs_are_numbered_per_gate_and_suite_within_the_rollout(store: StoreHandle) -> None:
    """The third canary run of a gate's suite is run 3; other gates, baselines and other
    suites do not count."""
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session)
        ids = []
        for gate_name, role, path in (
            ("daily", "canary", "s.jsonl"),
            ("daily", "baseline", "s.jsonl"),
            ("other", "canary", "s.jsonl"),
            ("daily", "canary", "sampled.jsonl"),
            ("daily", "canary", "s.jsonl"),
            ("daily", "canary", "s.jsonl"),
        ):
            summary = dataclasses.replace(run(role), suite_path=path)  # type: ignore[arg-type]
            ids.append(records.store_run(session, summary, rollout_id=rollout_id, gate=gate_name))
    with store.sessions() as session:
        number = records.run_number
        assert (
            number(
                session, rollout_id=rollout_id, gate="daily", suite_path="s.jsonl", run_id=ids[0]
            )
            == 1
        )
        assert (
            number(
                session, rollout_id=rollout_id, gate="daily", suite_path="s.jsonl", run_id=ids[5]
            )
            == 3
        )
        assert (
            number(
                session,
                rollout_id=rollout_id,
                gate="daily",
                suite_path="sampled.jsonl",
                run_id=ids[3],
            )
            == 1
        )


def test_judging_stored_runs_spends_the_share_of_the_newest_runs_number(
    store: StoreHandle, tmp_path: Path
) -> None:
    """After three daily runs of a gate with a sampled suite, the stored runs are judged as
    the third run of each suite, each at its share of the gate's alpha."""
    spec = gate("max_drop", every="24h", sampled_suite="sampled.jsonl")
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session)
        for _ in range(3):
            for name in ("s.jsonl", "sampled.jsonl"):
                for role in ("baseline", "canary"):
                    summary = dataclasses.replace(run(role), suite_path=str(tmp_path / name))
                    records.store_run(session, summary, rollout_id=rollout_id, gate="drop")
    with store.sessions() as session:
        evaluation = judge_stored(
            session,
            spec=spec,
            name="drop",
            role="trigger",
            rollout_id=rollout_id,
            now=NOW,
            base_dir=tmp_path,
        )
    assert evaluation.verdict is Verdict.PASS
    for label in ("suite", "sampled"):
        spending = evaluation.evidence[label]["alpha_spending"]
        assert (spending["run"], spending["looks"]) == (3, 2)
        assert evaluation.evidence[label]["alpha"] == pytest.approx(spent_alpha(0.05, 3, 2))
