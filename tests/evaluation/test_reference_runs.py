"""Reference suites run by the daemon's code path: both pools answer the RAG suite, the
answers are scored (token-F1, or a simulated judge), the runs are stored, and the gate is
judged on the stored runs; judge errors are bounded; each answer is judged once, across runs."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from aiohttp import web
from sqlalchemy import func, select

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.evaluation import records
from rolloutd.evaluation.references import ReferenceRun
from rolloutd.evaluation.schedule import judge_stored, run_suite_for_gate
from rolloutd.store.models import Rollout
from rolloutd.store.suite_models import JudgeScore
from tests.evaluation.conftest import SIM, engine, fleet
from tests.evaluation.test_reference_gate import RAG, FaithfulnessJudge
from tests.store.seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle

NOW = datetime(2026, 1, 5, tzinfo=UTC)
KEY = "sk-judge-0c41d7e29a"


def gate(**changes: Any) -> SuiteGate:
    """A suite gate on the RAG reference suite."""
    data: dict[str, Any] = {"kind": "suite", "suite": str(RAG), "rule": "no_regression"}
    data.update(changes)
    return SuiteGate(**data)


def run_gate(store: StoreHandle, plan: Plan, spec: SuiteGate, rollout_id: int) -> Any:
    """The gate run as the daemon's job runs it (without the job), both pools asked."""
    return run_suite_for_gate(
        store.sessions,
        plan=plan,
        spec=spec,
        name="faithfulness",
        role="step",
        rollout_id=rollout_id,
        step_index=0,
        now=NOW,
        options=SIM,
    )


def new_rollout(store: StoreHandle) -> int:
    """Another active rollout to store runs under (each of its own service)."""
    with store.sessions.begin() as session:
        count = session.scalar(select(func.count()).select_from(Rollout)) or 0
        return seed_rollout(session, service=f"agent-{count}")


class Judge(FaithfulnessJudge):
    """The faithfulness judge, or one that fails every request in the way ``mode`` says."""

    def __init__(self, mode: str = "fair") -> None:
        super().__init__()
        self.mode = mode
        self.authorizations: set[str | None] = set()

    async def handle(self, request: web.Request) -> web.Response:
        self.authorizations.add(request.headers.get("Authorization"))
        if self.mode == "fair":
            return await super().handle(request)
        self.requests += 1
        if self.mode == "down":
            return web.json_response({"error": "overloaded"}, status=503)
        if self.mode == "slow":
            await asyncio.sleep(5)
        content = "I would say it is mostly faithful, 0.8 or so."
        return web.json_response({"choices": [{"message": {"content": content}}]})


def judge_gate(url: str, **judge: Any) -> SuiteGate:
    """A judge-scored gate whose judge retries fast and reads its key from JUDGE_KEY."""
    settings = {"url": url, "model": "judge-70b", "timeout": 0.5, "retries": 1}
    return gate(scorer="judge", judge={**settings, "api_key_env": "JUDGE_KEY", **judge})


def test_token_f1_passes_a_faithful_canary_and_fails_an_unfaithful_one(store: StoreHandle) -> None:
    """Both pools answer, both runs are stored with their scores and read back equal; a
    canary that makes up half its answers fails, judged again from the stored runs."""
    spec = gate(scorer="token_f1")
    with fleet() as (plan, _, canary):
        same = new_rollout(store)
        passed = run_gate(store, plan, spec, same)
        canary.set_faults(unfaithful_rate=0.5)
        worse = new_rollout(store)
        failed = run_gate(store, plan, spec, worse)
    assert passed.verdict is Verdict.PASS, passed.reason
    assert passed.evidence["canary"]["mean_score"] == 1.0
    assert failed.verdict is Verdict.FAIL and failed.reason.startswith("token_f1 score")
    with store.sessions() as session:
        again = judge_stored(
            session, spec=spec, name="faithfulness", role="step", rollout_id=worse, now=NOW
        )
        canary_run = records.latest_run(session, rollout_id=worse, role="canary")
    assert again.verdict is Verdict.FAIL and again.value == failed.value
    assert isinstance(canary_run, ReferenceRun) and canary_run.scorer == "token_f1"
    assert len(canary_run.cases) == 26 and canary_run.mean_score == failed.value
    assert any(case.score is not None and case.score < 0.5 for case in canary_run.cases)


def test_a_stored_reference_run_reads_back_equal(store: StoreHandle) -> None:
    """Answers, scores, request errors and judge errors survive the database unchanged."""
    with fleet() as (plan, _, canary):
        canary.set_faults(unfaithful_rate=0.3)
        rollout_id = new_rollout(store)
        run_gate(store, plan, gate(scorer="token_f1"), rollout_id)
    with store.sessions() as session:
        run = records.latest_run(session, rollout_id=rollout_id, role="canary")
    assert isinstance(run, ReferenceRun)
    first = run.cases[0]
    edited = (
        dataclasses.replace(first, answer=None, score=None, error="HTTP 500: boom"),
        dataclasses.replace(run.cases[1], score=None, judge_error="garbage score: 'x'"),
        *run.cases[2:],
    )
    changed = dataclasses.replace(run, cases=edited, run_id=None)
    with store.sessions.begin() as session:
        run_id = records.store_run(session, changed)
    with store.sessions() as session:
        loaded = records.load_run(session, run_id)
    assert loaded == dataclasses.replace(changed, run_id=run_id)
    assert isinstance(loaded, ReferenceRun)
    assert (loaded.request_errors, loaded.judge_errors) == (1, 1)
    with store.sessions() as session:
        # A reference run makes no tool calls: the schema gates still read the call runs'.
        assert records.schema_counts(session, rollout_id=rollout_id, role="canary") == (0, 0, None)


def test_the_judge_fails_an_unfaithful_canary_and_judges_each_answer_once_across_runs(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge is asked once per distinct answer, with the key from the plan's variable;
    its scores are kept, so the next run (and another rollout) with the same answers asks
    it nothing; the key is in no evaluation and no log."""
    monkeypatch.setenv("JUDGE_KEY", KEY)
    server = Judge()
    with fleet() as (plan, _, canary), engine(server.handle) as url:
        canary.set_faults(unfaithful_rate=0.5)
        spec = judge_gate(url)
        with structlog.testing.capture_logs() as logs:
            first = run_gate(store, plan, spec, new_rollout(store))
        asked = server.requests
        second = run_gate(store, plan, spec, new_rollout(store))
    assert first.verdict is Verdict.FAIL and first.evidence["scorer"] == "judge"
    assert 26 < asked < 52  # the answers both builds gave alike were judged once
    assert server.requests == asked  # the second run's answers were all judged before
    assert second.verdict is Verdict.FAIL and second.value == first.value
    assert server.authorizations == {f"Bearer {KEY}"}
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(JudgeScore)) == asked
    assert KEY not in repr(first) + repr(second) + repr(logs)


@pytest.mark.parametrize("mode", ["down", "slow", "garbage"])
def test_a_judge_that_fails_makes_the_gate_inconclusive_never_passed(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A judge answering 503, too slowly or with prose instead of a score scores nothing:
    every answer is a judge error, past the bound, so the gate is inconclusive, and nothing
    is kept as a score."""
    monkeypatch.setenv("JUDGE_KEY", KEY)
    server = Judge(mode)
    with fleet() as (plan, _, _canary), engine(server.handle) as url:
        evaluation = run_gate(store, plan, judge_gate(url, concurrency=16), new_rollout(store))
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert "could not be scored (judge errors" in evaluation.reason
    assert evaluation.evidence["canary"]["judge_errors"] == 26
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(JudgeScore)) == 0


def test_a_judge_key_missing_from_the_environment_is_inconclusive_before_any_request(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan names a variable that is unset: the gate says so, and no engine is asked."""
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    with fleet() as (plan, stable, _):
        evaluation = run_gate(store, plan, judge_gate("http://127.0.0.1:9"), new_rollout(store))
        assert stable.ledger.position() == 0
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert "JUDGE_KEY (the judge's API key) is not set" in evaluation.reason


def test_a_reference_suite_without_a_scorer_is_inconclusive_naming_the_field(
    store: StoreHandle,
) -> None:
    """No scorer, no run: the reason names the gate's 'scorer'."""
    with fleet() as (plan, _, _):
        evaluation = run_gate(store, plan, gate(), new_rollout(store))
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert "needs the gate's 'scorer'" in evaluation.reason
