"""Tests of the sampled-suite benchmark: its fast verdicts are judge_suite's, and it runs."""

from __future__ import annotations

import numpy as np
import pytest

from bench import sampled_suite
from bench.sampled_suite import SCENARIOS, SOURCES, Scenario, draw_day, judged, main, verdicts


@pytest.mark.parametrize(
    "scenario",
    [Scenario("A/A", 0.05, 0.03), Scenario("copied fields wrong", 0.05, 0.03, 0.05)],
    ids=["aa", "regressed"],
)
def test_the_verdicts_from_the_counts_are_judge_suites(scenario: Scenario) -> None:
    """Every rule on every source, day by day, fails exactly when judge_suite fails it."""
    rng = np.random.default_rng([1, 2])
    seen = set()
    for run in (1, 2, 3):
        day = draw_day(rng, scenario)
        for source in SOURCES:
            for rule, fails in verdicts(day, run, source).items():
                assert judged(day, run, source, rule) == fails, (run, source, rule)
                seen.add(fails)
    assert seen == {True, False}


def test_a_day_samples_the_budget_and_keeps_the_rare_tool_whole() -> None:
    """300 cases a day, the rarest tool with fewer than an equal share and the others more."""
    day = draw_day(np.random.default_rng(3), SCENARIOS[0])
    counts = np.bincount(day.tools, minlength=len(sampled_suite.TOOL_NAMES))
    assert counts.sum() == sampled_suite.CASES
    rare = sampled_suite.TOOL_NAMES.index("transfer_funds")
    assert counts[rare] < 60 < min(np.delete(counts, rare))


def test_replays_of_the_same_build_without_churn_or_wrong_references_never_fail() -> None:
    """Both replays equal the reference: no discordant case, no rule fails on any source."""
    outcome = sampled_suite.rollout(Scenario("A/A", 0.0, 0.0), np.random.default_rng(4), 5, False)
    assert set(outcome.values()) == {None}


def test_the_benchmark_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny run prints the goals, the A/A table and the detection table."""
    assert main(["--rollouts", "2", "--days", "2", "--jobs", "1", "--check", "0"]) == 0
    out = capsys.readouterr().out
    assert "| churn | wrong refs | rule | paired |" in out
    assert "| copied fields wrong | churn | rule |" in out
    assert "max_drop (paired)" in out
