"""Reference suites end to end: simulated replicas answer the RAG example suite, the answers
are scored (token-F1, or a simulated judge) and the canary is judged per case against stable."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import SuiteGate
from rolloutd.errors import BadInput
from rolloutd.evaluation.judge import JudgeCache
from rolloutd.evaluation.reference_gate import judge_reference
from rolloutd.evaluation.references import ReferenceRun, answer_suite, score_runs
from rolloutd.evaluation.runner import run_suite
from rolloutd.evaluation.suite import Suite, load_suite
from rolloutd.sim.references import UNSUPPORTED
from tests.evaluation.conftest import SIM, engine, start
from tests.plans import example_dict, problems_of

RAG = Path(__file__).resolve().parents[2] / "gates" / "suites" / "support-rag-26.jsonl"
NOW = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.fixture(scope="module")
def rag() -> Suite:
    """The committed RAG example suite."""
    return load_suite(RAG)


def answers(suite: Suite, unfaithful: float = 0.0) -> tuple[ReferenceRun, ReferenceRun]:
    """The suite answered by a faithful stable replica and a canary with ``unfaithful`` rate."""
    stable, canary = start("exact", pool="stable"), start("exact", pool="canary")
    try:
        canary.set_faults(unfaithful_rate=unfaithful)
        baseline = asyncio.run(answer_suite(suite, stable.url, role="baseline", options=SIM))
        answered = asyncio.run(answer_suite(suite, canary.url, role="canary", options=SIM))
    finally:
        stable.stop()
        canary.stop()
    return baseline, answered


def gate(**changes: Any) -> SuiteGate:
    """A reference suite gate on the RAG suite."""
    data: dict[str, Any] = {"kind": "suite", "suite": str(RAG), "rule": "at_least_baseline"}
    data.update(changes)
    return SuiteGate(**data)


def judged(spec: SuiteGate, runs: list[ReferenceRun]) -> Any:
    """The gate's evaluation of the scored pair."""
    baseline, canary = runs
    return judge_reference(spec, baseline, canary, name="faithfulness", role="step", now=NOW)


def test_a_faithful_replica_answers_each_case_with_its_reference(rag: Suite) -> None:
    """Every case answered, with the context in the prompt; token-F1 and exact are 1.0."""
    baseline, _ = answers(rag)
    assert baseline.request_errors == 0
    (scored,) = asyncio.run(score_runs(rag, [baseline], "token_f1"))
    assert scored.mean_score == 1.0
    (exact,) = asyncio.run(score_runs(rag, [baseline], "exact"))
    assert exact.mean_score == 1.0


def test_token_f1_passes_an_a_a_pair_and_fails_a_worse_canary(rag: Suite) -> None:
    """Two faithful builds pass; a canary unfaithful on half its answers fails, per case."""
    spec = gate(scorer="token_f1")
    same = asyncio.run(score_runs(rag, answers(rag), "token_f1"))
    assert judged(spec, same).verdict is Verdict.PASS
    worse = asyncio.run(score_runs(rag, answers(rag, unfaithful=0.5), "token_f1"))
    evaluation = judged(spec, worse)
    assert evaluation.verdict is Verdict.FAIL
    assert evaluation.reason.startswith("token_f1 score")
    assert evaluation.evidence["paired"]["pairs"] == len(rag)
    worst = evaluation.evidence["worst_cases"]
    assert worst and all(row["canary"] < row["baseline"] for row in worst)
    assert evaluation.evidence["alpha"] == pytest.approx(0.05 * 6 / 3.141592653589793**2)


def test_a_loss_within_the_max_drop_margin_passes(rag: Suite) -> None:
    """The same worse canary under max_drop with a 60-point margin is not a breach."""
    worse = asyncio.run(score_runs(rag, answers(rag, unfaithful=0.5), "token_f1"))
    spec = gate(scorer="token_f1", rule="max_drop", max_drop_points=60.0)
    evaluation = judge_reference(spec, *worse, name="f", role="trigger", now=NOW)
    assert evaluation.verdict is Verdict.PASS
    tight = gate(scorer="token_f1", rule="max_drop", max_drop_points=1.0)
    assert judge_reference(tight, *worse, name="f", role="trigger", now=NOW).verdict is (
        Verdict.BREACH
    )


class FaithfulnessJudge:
    """A simulated judge: 0 for an answer with the unsupported sentence, 1 otherwise; answers
    500 to every request whose prompt holds one of ``failing``."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.failing = failing
        self.requests = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        if any(word in body["messages"][1]["content"] for word in self.failing):
            return web.json_response({"error": "boom"}, status=500)
        graded = body["messages"][1]["content"].split("Answer to grade:\n", 1)[1]
        score = 0 if UNSUPPORTED in graded else 1
        content = f'{{"score": {score}, "reason": "simulated"}}'
        return web.json_response({"choices": [{"message": {"content": content}}]})


def test_the_judge_gate_judges_each_distinct_answer_once_and_fails_a_worse_canary(
    rag: Suite,
) -> None:
    """Answers both builds share are judged once; the unfaithful canary fails on faithfulness."""
    server = FaithfulnessJudge()
    baseline, canary = answers(rag, unfaithful=0.5)
    distinct = {(r.case_id, r.answer) for run in (baseline, canary) for r in run.cases}
    with engine(server.handle) as url:
        spec = gate(scorer="judge", judge={"url": url, "model": "judge-70b"})
        assert spec.judge is not None
        cache = JudgeCache()
        scored = asyncio.run(
            score_runs(rag, [baseline, canary], "judge", judge=spec.judge, cache=cache)
        )
    assert server.requests == len(distinct) < 2 * len(rag)
    assert scored[0].mean_score == 1.0
    evaluation = judged(spec, scored)
    assert evaluation.verdict is Verdict.FAIL
    assert evaluation.evidence["scorer"] == "judge"


def test_judge_errors_beyond_the_bound_make_the_gate_inconclusive(rag: Suite) -> None:
    """A judge that fails 3 of 26 answers (over 5%) measures too little: inconclusive, not pass."""
    server = FaithfulnessJudge(
        failing=("Leeds store open on", "cash in a gift card", "Do you sell ski")
    )
    runs = answers(rag)
    with engine(server.handle) as url:
        spec = gate(scorer="judge", judge={"url": url, "model": "m", "retries": 2})
        assert spec.judge is not None
        scored = asyncio.run(score_runs(rag, runs, "judge", judge=spec.judge))
    assert scored[0].judge_errors == scored[1].judge_errors == 3
    assert server.requests == 26 - 3 + 3 * 3  # each failing answer asked 3 times, then given up
    evaluation = judged(spec, scored)
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert "could not be scored" in evaluation.reason
    lenient = gate(
        scorer="judge", judge={"url": "http://127.0.0.1:9", "model": "m", "max_errors": 0.2}
    )
    assert judged(lenient, scored).verdict is Verdict.PASS


def test_runs_of_different_suites_are_inconclusive(rag: Suite, tmp_path: Path) -> None:
    """A canary run of other bytes is never paired with the baseline."""
    baseline, canary = asyncio.run(score_runs(rag, answers(rag), "token_f1"))
    other = ReferenceRun(**{**canary.__dict__, "suite_sha256": "0" * 64})
    evaluation = judge_reference(gate(), baseline, other, name="f", role="step", now=NOW)
    assert evaluation.verdict is Verdict.INCONCLUSIVE


def test_the_call_runner_refuses_a_reference_suite(rag: Suite) -> None:
    """Running a reference suite as tool calls is bad input naming the file and field."""
    with pytest.raises(BadInput, match=r"support-rag-26\.jsonl: reference: a suite of reference"):
        run_suite(rag, "http://127.0.0.1:9")


def test_the_reference_runner_refuses_a_suite_of_calls(example_suite: Suite) -> None:
    """Asking a tool-call suite for text answers is bad input naming the file and field."""
    with pytest.raises(BadInput, match=r"tool-args-300\.jsonl: expected: a suite of tool calls"):
        asyncio.run(answer_suite(example_suite, "http://127.0.0.1:9"))


def test_a_judge_scorer_needs_a_judge_section() -> None:
    """scorer: judge without judge, or judge without scorer: judge, is refused by the plan."""
    with pytest.raises(ValueError, match="needs a 'judge' section"):
        gate(scorer="judge")
    with pytest.raises(ValueError, match="needs scorer: judge"):
        gate(judge={"url": "http://127.0.0.1:9", "model": "m"})
    with pytest.raises(ValueError, match="must contain"):
        gate(scorer="judge", judge={"url": "http://127.0.0.1:9", "model": "m", "prompt": "x"})


@pytest.mark.parametrize(
    ("judge", "field", "words"),
    [
        ({"model": "m"}, "judge.url", "required, but missing"),
        ({"url": "http://j:8000", "model": "m", "scale": [5, 1]}, "judge", "low < high"),
        (
            {"url": "http://j:8000", "model": "m", "scale": ["1", 5]},
            "judge.scale[0]",
            "valid number",
        ),
        ({"url": "http://j:8000", "model": "m", "temperature": 0.7}, "judge.temperature", ""),
        ({"url": "http://j:8000", "model": "m", "api_key": "sk-x"}, "judge.api_key", ""),
    ],
)
def test_a_plan_with_a_bad_judge_is_refused_naming_file_and_field(
    judge: dict[str, Any], field: str, words: str
) -> None:
    """plan validate names plan.yaml, the gate and the judge's field; a key in the plan is
    refused (only the name of its environment variable belongs there)."""
    data = example_dict()
    data["gates"]["faithfulness"] = {
        "kind": "suite",
        "suite": "gates/suites/support-rag-26.jsonl",
        "rule": "at_least_baseline",
        "scorer": "judge",
        "judge": judge,
    }
    problems = [str(problem) for problem in problems_of(data)]
    wanted = f"plan.yaml: gates.faithfulness.suite.{field}"
    assert any(p.startswith(wanted) and words in p for p in problems), problems
    assert not any("sk-x" in p for p in problems), problems
