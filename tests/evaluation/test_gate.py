"""Tests of the suite gates: verdicts, per-field evidence, and when a suite is due."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import SuiteGate
from rolloutd.core.suite_outcomes import FieldOutcome
from rolloutd.evaluation.compare import CaseResult, FieldResult
from rolloutd.evaluation.gate import WHOLE_CALL, combine, judge_suite, suite_due
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.gates.base import Evaluation, Role

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
FIELDS = ("pay.amount", "pay.date", "pay.payee")


def gate(rule: str, **extra: object) -> SuiteGate:
    """A suite gate with ``rule``."""
    return SuiteGate.model_validate({"kind": "suite", "suite": "s.jsonl", "rule": rule, **extra})


def judge(
    spec: SuiteGate,
    baseline: RunSummary,
    canary: RunSummary,
    *,
    name: str = "g",
    role: Role = "step",
) -> Evaluation:
    """``judge_suite`` for gate ``name`` in ``role`` at ``NOW``."""
    return judge_suite(spec, baseline, canary, name=name, role=role, now=NOW)


def run(
    role: RunRole,
    cases: int = 300,
    wrong: Mapping[str, int] | None = None,
    *,
    errors: int = 0,
    sha: str = "a" * 64,
) -> RunSummary:
    """A run of ``cases`` cases, each with three fields; ``wrong[field]`` cases (the first
    ones) have a wrong value in that field, and the last ``errors`` are request errors."""
    wrong = wrong or {}
    results = []
    for index in range(cases):
        case_id = f"c{index:04d}"
        if index >= cases - errors:
            results.append(CaseResult(case_id, "request_error", "pay", None, None, None))
            continue
        fields = []
        for key in FIELDS:
            outcome: FieldOutcome = "wrong_value" if index < wrong.get(key, 0) else "correct"
            fields.append(FieldResult(key.split(".")[1], outcome, True, outcome == "correct"))
        exact = all(f.outcome == "correct" for f in fields)
        results.append(
            CaseResult(
                case_id,
                "correct" if exact else "wrong_value",
                "pay",
                exact,
                exact,
                True,
                tuple(fields),
                "pay",
            )
        )
    return RunSummary("s.jsonl", sha, f"http://{role}", role, tuple(results), NOW, NOW)


def test_identical_runs_pass_every_rule() -> None:
    """No discordant case, nothing to fail on."""
    baseline, canary = (
        run("baseline", wrong={"pay.amount": 5}),
        run("canary", wrong={"pay.amount": 5}),
    )
    for rule, role in (
        ("no_regression", "step"),
        ("at_least_baseline", "step"),
        ("max_drop", "trigger"),
    ):
        evaluation = judge(gate(rule), baseline, canary, role=role)
        assert evaluation.verdict is Verdict.PASS, (rule, evaluation.reason)
        assert evaluation.samples == 300


def test_a_regression_in_one_field_fails_and_names_that_field() -> None:
    """Twelve more wrong amounts on the canary: the amount row regresses, the others do not."""
    baseline = run("baseline")
    canary = run("canary", wrong={"pay.amount": 12})
    evaluation = judge(gate("no_regression"), baseline, canary)
    assert evaluation.verdict is Verdict.FAIL
    assert "pay.amount" in evaluation.reason
    rows = {row["field"]: row for row in evaluation.evidence["fields"]}
    assert rows["pay.amount"]["regressed"] and rows["pay.amount"]["canary_worse"] == 12
    assert not rows["pay.date"]["regressed"] and not rows["pay.payee"]["regressed"]
    assert rows["pay.amount"]["canary"]["wrong_value"] == 12
    assert rows[WHOLE_CALL]["canary_worse"] == 12


def test_a_small_per_field_difference_is_not_a_regression() -> None:
    """Three more wrong values in 300 is within noise after the Holm adjustment."""
    evaluation = judge(gate("no_regression"), run("baseline"), run("canary", wrong={"pay.date": 3}))
    assert evaluation.verdict is Verdict.PASS
    assert evaluation.statistic is not None and evaluation.statistic >= 0.05


def test_at_least_baseline_fails_on_a_significant_loss_of_whole_calls() -> None:
    """Ten calls lost, none gained: exact McNemar p = 1/1024."""
    evaluation = judge(
        gate("at_least_baseline"), run("baseline"), run("canary", wrong={"pay.payee": 10})
    )
    assert evaluation.verdict is Verdict.FAIL
    assert evaluation.statistic == pytest.approx(1 / 1024)


def test_max_drop_breaches_as_a_trigger_with_its_operating_characteristics() -> None:
    """A 6-point drop breaches; the evidence says how often the rule fires on this many cases."""
    evaluation = judge(
        gate("max_drop", max_drop_points=1.0),
        run("baseline"),
        run("canary", wrong={"pay.amount": 18}),
        name="exactness_drop",
        role="trigger",
    )
    assert evaluation.verdict is Verdict.BREACH
    characteristics = evaluation.evidence["operating_characteristics"]
    assert characteristics["cases"] == 300
    at_zero = characteristics["by_true_drop"][0]
    assert at_zero["drop_points"] == 0 and at_zero["rule"] < 0.05 < at_zero["naive"]
    assert evaluation.evidence["max_drop"]["fires"] is True


def test_max_drop_does_not_fire_on_a_one_point_observed_drop() -> None:
    """Three more wrong calls in 300 (1 point) is what the naive rule would alarm on; not this."""
    evaluation = judge(
        gate("max_drop"),
        run("baseline", wrong={"pay.date": 6}),
        run("canary", wrong={"pay.date": 9}),
        role="trigger",
    )
    assert evaluation.verdict is Verdict.PASS
    assert evaluation.evidence["max_drop"]["drop_points"] == 1.0


def test_runs_of_different_suites_are_inconclusive() -> None:
    """Different digests cannot be paired."""
    evaluation = judge(gate("no_regression"), run("baseline"), run("canary", sha="b" * 64))
    assert evaluation.verdict is Verdict.INCONCLUSIVE


def test_too_many_request_errors_are_inconclusive_not_a_regression() -> None:
    """A canary that timed out on 10% of cases measured too little to pass or fail."""
    evaluation = judge(gate("no_regression"), run("baseline"), run("canary", errors=30))
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert "30 of 300" in evaluation.reason


def test_request_errors_under_the_limit_are_left_out_of_the_pairs() -> None:
    """Cases without an answer count for neither build."""
    evaluation = judge(gate("no_regression"), run("baseline"), run("canary", errors=6))
    assert evaluation.verdict is Verdict.PASS
    assert evaluation.samples == 294


def test_combine_keeps_the_worst_verdict_and_both_evidences() -> None:
    """A failing sampled set fails the gate even when the fixed suite passes."""
    baseline = run("baseline")
    good = judge(gate("at_least_baseline"), baseline, run("canary"))
    bad = judge(gate("at_least_baseline"), baseline, run("canary", wrong={"pay.amount": 20}))
    combined = combine([good, bad], ["suite", "sampled"])
    assert combined.verdict is Verdict.FAIL
    assert set(combined.evidence) == {"suite", "sampled"}
    assert combined.reason.startswith("sampled: exactness")


def test_a_suite_is_due_at_entry_and_then_every_interval() -> None:
    """At entry, then after `every`; a run before the step started does not count."""
    spec = gate("at_least_baseline", every="24h")
    entered = NOW - timedelta(hours=48)
    assert suite_due(spec, last_run_at=None, step_entered_at=entered, now=NOW)
    assert suite_due(
        spec, last_run_at=entered - timedelta(hours=2), step_entered_at=entered, now=NOW
    )
    assert not suite_due(
        spec, last_run_at=NOW - timedelta(hours=23), step_entered_at=entered, now=NOW
    )
    assert suite_due(spec, last_run_at=NOW - timedelta(hours=24), step_entered_at=entered, now=NOW)
    late = gate("max_drop", every="24h", at_entry=False)
    recent = NOW - timedelta(hours=1)
    assert not suite_due(late, last_run_at=None, step_entered_at=recent, now=NOW)
    assert suite_due(late, last_run_at=None, step_entered_at=NOW - timedelta(hours=24), now=NOW)
    once = gate("no_regression")
    assert not suite_due(
        once, last_run_at=NOW - timedelta(minutes=5), step_entered_at=entered, now=NOW
    )


def test_the_int4_like_build_fails_no_regression_against_the_exact_build(
    profile_runs: dict[str, RunSummary],
) -> None:
    """Real profiles: the value errors of int4-like fail the shadow gate; format noise alone
    would not (exact against itself passes)."""
    exact = dataclasses.replace(profile_runs["exact"], role="baseline")
    quantised = profile_runs["int4-like"]
    spec = gate("no_regression")
    failed = judge(spec, exact, quantised)
    assert failed.verdict is Verdict.FAIL
    rows = {row["field"]: row for row in failed.evidence["fields"]}
    assert rows[WHOLE_CALL]["regressed"]
    assert rows[WHOLE_CALL]["canary_better"] == 0
    wrong_fields = {
        key for key, tally in quantised.fields.items() if tally.counts.get("wrong_value")
    }
    assert {key for key, row in rows.items() if row["canary_worse"]} - {WHOLE_CALL} == wrong_fields
    same = judge(spec, exact, profile_runs["exact"])
    assert same.verdict is Verdict.PASS
