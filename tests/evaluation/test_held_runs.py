"""A gate's run held as a job: each case's result is kept as it completes, a run resumed after
its first attempt stopped asks only the cases without one and is judged as an uninterrupted
run, and a live sample is kept with the job so a resumed run replays the same cases."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select, text

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.evaluation.held import JobRef
from rolloutd.evaluation.runner import RunAbandoned, RunnerOptions
from rolloutd.evaluation.schedule import judge_stored, run_suite_for_gate
from rolloutd.gates.base import Evaluation
from rolloutd.gateway import Capture
from rolloutd.reconcile import NotLeading
from rolloutd.sim.traffic import TrafficGenerator
from rolloutd.store import suite_jobs
from rolloutd.store.suite_jobs import Claim
from rolloutd.store.suite_models import SuiteJobCase, SuiteSample
from tests.evaluation.conftest import first_cases, fleet, start
from tests.evaluation.test_reference_gate import RAG
from tests.store.seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle

NOW = datetime.now(UTC) + timedelta(seconds=1)
OPTIONS = RunnerOptions(concurrency=4, send_expected=True, timeout_s=10, retries=1)
_SERVICES = itertools.count()
CASES = 120


class Holder:
    """The job's holder as the evaluation reconciler is one, without a leader lease: it
    claims the job, fences writes by the claim, and refuses requests after ``permits``."""

    def __init__(self, store: StoreHandle, job: JobRef, *, permits: int | None = None) -> None:
        self.store = store
        self.job = job
        self.permits = permits
        self.renew_every = 60.0
        with store.sessions.begin() as session:
            row = suite_jobs.open_job(session, rollout_id=self._rollout(session), gate="g")
            assert row is not None
            # Each attempt claims once the last one's claim lapsed, a day after it was taken.
            taken_at = NOW + timedelta(days=row.attempts)
            claim = suite_jobs.claim(
                session,
                job.id,
                attempts=row.attempts,
                holder="me",
                until=taken_at + timedelta(days=1),
                now=taken_at,
            )
        assert claim is not None
        self.claim: Claim = claim

    def _rollout(self, session: Any) -> int:
        return int(
            session.scalar(
                text("SELECT rollout_id FROM suite_jobs WHERE id = :id"), {"id": self.job.id}
            )
        )

    def permit(self, timeout_s: float) -> bool:
        if self.permits is None:
            return True
        self.permits -= 1
        return self.permits >= 0

    def stopped(self) -> bool:
        return False

    def renew(self) -> None:
        pass

    @contextmanager
    def write(self) -> Iterator[Any]:
        with self.store.sessions.begin() as session:
            if not suite_jobs.holds(session, self.claim):
                raise NotLeading("the job is no longer ours")
            yield session


def new_job(store: StoreHandle) -> JobRef:
    """A rollout (of a service of its own) and the open job of its gate ``g``."""
    with store.sessions.begin() as session:
        rollout = seed_rollout(session, service=f"svc-{next(_SERVICES)}")
        # Due now: a live sample ends here, after what the capture fixture captured.
        due = datetime.now(UTC)
        job = suite_jobs.add_job(session, rollout_id=rollout, gate="g", step_index=0, due_at=due)
        return JobRef(job.id, job.name, job.due_at)


def run(
    store: StoreHandle, plan: Plan, spec: SuiteGate, job: JobRef | None, **held: Any
) -> Evaluation:
    """The gate's run for ``job`` (None: an ad-hoc run of a rollout of its own)."""
    if job is None:
        with store.sessions.begin() as session:
            rollout_id = seed_rollout(session, service=f"svc-{next(_SERVICES)}")
    else:
        with store.sessions() as session:
            rollout_id = int(
                session.scalar(
                    text("SELECT rollout_id FROM suite_jobs WHERE id = :id"), {"id": job.id}
                )
            )
    return run_suite_for_gate(
        store.sessions,
        plan=plan,
        spec=spec,
        name="g",
        role="step",
        rollout_id=rollout_id,
        step_index=0,
        now=NOW,
        options=OPTIONS,
        control=None if job is None else Holder(store, job, **held),
    )


def kept(store: StoreHandle, role: str) -> int:
    return len(kept_ids(store, role))


def kept_ids(store: StoreHandle, role: str) -> set[str]:
    """The cases whose results the job keeps for ``role``."""
    with store.sessions() as session:
        query = select(SuiteJobCase.case_id).where(SuiteJobCase.role == role)
        return set(session.scalars(query))


def case_rows(store: StoreHandle, rollout_id: int) -> list[tuple[Any, ...]]:
    with store.sessions() as session:
        return [
            tuple(row)
            for row in session.execute(
                text(
                    "SELECT r.role, c.case_id, c.outcome, c.exact, c.arguments, c.attempts"
                    " FROM suite_case_results c JOIN suite_runs r ON r.id = c.run_id"
                    " WHERE r.rollout_id = :id ORDER BY r.role, c.position"
                ),
                {"id": rollout_id},
            )
        ]


def rollout_of(store: StoreHandle, job: JobRef) -> int:
    with store.sessions() as session:
        return int(
            session.scalar(text("SELECT rollout_id FROM suite_jobs WHERE id = :id"), {"id": job.id})
        )


def test_a_resumed_run_asks_only_the_cases_without_a_kept_result(
    store: StoreHandle, tmp_path: Path
) -> None:
    """The first attempt stops after some requests, its finished cases kept; the second asks
    each pool exactly the cases without a result, stores whole runs and forgets nothing it
    should keep; cases and verdict match an uninterrupted run's."""
    suite = first_cases(tmp_path / "small.jsonl", CASES)
    spec = SuiteGate.model_validate({"kind": "suite", "suite": str(suite), "rule": "no_regression"})
    with fleet("int4-like") as (plan, stable, canary):
        job = new_job(store)
        with pytest.raises(RunAbandoned):
            run(store, plan, spec, job, permits=CASES)
        kept_before = {role: kept_ids(store, role) for role in ("baseline", "canary")}
        assert 0 < sum(map(len, kept_before.values())) <= CASES
        asked_before = (stable.ledger.position(), canary.ledger.position())
        resumed = run(store, plan, spec, job)
        asked_again = (
            stable.ledger.position() - asked_before[0],
            canary.ledger.position() - asked_before[1],
        )
        reference = run(store, plan, spec, None)
    # Each case without a kept result, asked once (and again on the runner's retry).
    rollout_id = rollout_of(store, job)
    assert asked_again == tuple(
        sum(row[5] for row in case_rows(store, rollout_id) if row[0] == role and row[1] not in ids)
        for role, ids in kept_before.items()
    )
    assert (resumed.verdict, resumed.reason) == (reference.verdict, reference.reason)
    assert resumed.verdict is Verdict.FAIL
    with store.sessions() as session:
        reference_rollout = int(session.scalar(text("SELECT max(rollout_id) FROM suite_runs")) or 0)
    # The same cases, outcomes and answers (attempts aside: a retry is the transport's).
    assert [row[:5] for row in case_rows(store, rollout_id)] == [
        row[:5] for row in case_rows(store, reference_rollout)
    ]


def test_a_run_whose_claim_was_taken_keeps_no_result(store: StoreHandle, tmp_path: Path) -> None:
    """Another holder claimed the job: the first result's write is refused, the run stops."""
    suite = first_cases(tmp_path / "small.jsonl", 10)
    spec = SuiteGate.model_validate({"kind": "suite", "suite": str(suite), "rule": "no_regression"})
    job = new_job(store)
    holder = Holder(store, job)
    with store.sessions.begin() as session:
        taken = suite_jobs.claim(
            session,
            job.id,
            attempts=1,
            holder="other",
            until=NOW + timedelta(2),
            now=NOW + timedelta(1),
        )
    assert taken is not None
    with fleet("exact") as (plan, _, _), pytest.raises(NotLeading):
        run_suite_for_gate(
            store.sessions,
            plan=plan,
            spec=spec,
            name="g",
            role="step",
            rollout_id=rollout_of(store, job),
            step_index=0,
            now=NOW,
            options=OPTIONS,
            control=holder,
        )
    assert kept(store, "canary") == kept(store, "baseline") == 0


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 agent requests served by stable, every one captured."""
    directory = tmp_path_factory.mktemp("capture")
    replica = start("exact", pool="stable", seed=5)
    try:
        capture = Capture(directory, share=1.0, seed=3)
        TrafficGenerator(
            replica.url, concurrency=8, max_requests=120, capture=capture, time_scale=1e-5, seed=6
        ).run()
    finally:
        replica.stop()
    return directory


def live_gate(capture: Path, rule: str = "at_least_baseline", **sampled: Any) -> SuiteGate:
    return SuiteGate.model_validate(
        {
            "kind": "suite",
            "rule": rule,
            "sampled": {"capture": str(capture), "cases": 40, "min_cases": 10, **sampled},
        }
    )


def test_a_live_sample_is_kept_with_the_job_and_replayed_by_the_resumed_run(
    store: StoreHandle, captured: Path, tmp_path: Path
) -> None:
    """The first attempt samples the capture and keeps the suite in the database before it
    asks anything; with the capture gone, the resumed attempt replays the kept cases to both
    pools (the baseline too, though the rule reuses a shadow baseline for file suites)."""
    capture = tmp_path / "capture"
    shutil.copytree(captured, capture)
    spec = live_gate(capture)
    with fleet("exact") as (plan, stable, canary):
        job = new_job(store)
        with pytest.raises(RunAbandoned):
            run(store, plan, spec, job, permits=0)
        shutil.rmtree(capture)
        evaluation = run(store, plan, spec, job)
        asked = (stable.ledger.position(), canary.ledger.position())
    assert evaluation.verdict is Verdict.PASS, evaluation.reason
    assert asked == (40, 40)
    rollout_id = rollout_of(store, job)
    with store.sessions() as session:
        sample = session.scalar(select(SuiteSample).where(SuiteSample.job_id == job.id))
        assert sample is not None and sample.reason is None
        assert sample.kept == 40 and sample.until == job.due_at
        assert sample.size > 0 and sample.suite is not None and len(sample.suite) < sample.size
        judged = judge_stored(
            session, spec=spec, name="g", role="step", rollout_id=rollout_id, now=NOW
        )
    assert judged.verdict is Verdict.PASS
    assert judged.evidence["suite"] == str(capture)
    assert judged.evidence["suite_sha256"] == sample.suite_sha256
    assert judged.evidence["alpha_spending"]["looks"] == 1


def test_live_traffic_is_one_more_look_beside_the_suite(
    store: StoreHandle, captured: Path, tmp_path: Path
) -> None:
    """A gate with a suite file and live traffic judges both, each at half its share of
    alpha, and labels each one's evidence."""
    suite = first_cases(tmp_path / "small.jsonl", 20)
    spec = SuiteGate.model_validate(
        {**live_gate(captured, "no_regression").model_dump(), "suite": str(suite)}
    )
    with fleet("exact") as (plan, _, _):
        evaluation = run(store, plan, spec, new_job(store))
    assert evaluation.verdict is Verdict.PASS, evaluation.reason
    for label in ("suite", "live"):
        assert evaluation.evidence[label]["alpha_spending"]["looks"] == 2


def test_too_little_live_traffic_is_inconclusive_with_the_counts_and_judged_so(
    store: StoreHandle, captured: Path, tmp_path: Path
) -> None:
    """Fewer usable cases than min_cases, or no capture directory: the run asks nothing,
    keeps the reason with the job's sample, and the stored judgement gives it, counts only."""
    missing = tmp_path / "nothing-here"
    with fleet("exact") as (plan, stable, canary):
        job = new_job(store)
        too_few = run(store, plan, live_gate(captured, min_cases=5000, cases=5000), job)
        other = new_job(store)
        absent = run(store, plan, live_gate(missing), other)
        asked = (stable.ledger.position(), canary.ledger.position())
    assert asked == (0, 0)
    assert too_few.verdict is Verdict.INCONCLUSIVE
    found = too_few.evidence  # the sample's counts, never its content
    dropped = ", ".join(f"{n} {why}" for why, n in found["dropped"].items()) or "none"
    assert too_few.reason == (
        f"live sample: {captured}: {found['kept']} usable captured case(s) in the last 1d, "
        f"fewer than min_cases 5000 (dropped: {dropped})"
    )
    assert 10 < found["kept"] < 5000
    assert absent.verdict is Verdict.INCONCLUSIVE
    assert absent.reason == f"live sample: {missing}: no such capture directory"
    for ran, spec, evaluation in (
        (job, live_gate(captured), too_few),
        (other, live_gate(missing), absent),
    ):
        rollout_id = rollout_of(store, ran)
        with store.sessions() as session:
            judged = judge_stored(
                session, spec=spec, name="g", role="step", rollout_id=rollout_id, now=NOW
            )
        assert (judged.verdict, judged.reason) == (Verdict.INCONCLUSIVE, evaluation.reason)


def test_a_sample_over_the_storage_bound_is_drawn_again_smaller(
    store: StoreHandle, captured: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the bound at 64 KiB, the 40 cases asked for (some 130 KiB) do not fit: fewer are
    drawn (still at least min_cases), the kept suite fits, and those are the cases replayed;
    at 8 KiB not even min_cases fit, and the run says so in sizes."""
    from rolloutd.evaluation import live

    monkeypatch.setattr(live, "MAX_SAMPLED_BYTES", 64 * 1024)
    with fleet("exact") as (plan, stable, _):
        job = new_job(store)
        evaluation = run(store, plan, live_gate(captured, min_cases=5), job)
        asked = stable.ledger.position()
    with store.sessions() as session:
        sample = session.scalar(select(SuiteSample).where(SuiteSample.job_id == job.id))
    assert sample is not None and sample.reason is None
    assert 5 <= sample.kept < 40 and sample.size <= 64 * 1024
    assert asked == sample.kept
    assert evaluation.verdict is Verdict.PASS, evaluation.reason

    monkeypatch.setattr(live, "MAX_SAMPLED_BYTES", 8 * 1024)
    with fleet("exact") as (plan, stable, _):
        too_big = run(store, plan, live_gate(captured, min_cases=5), new_job(store))
        assert stable.ledger.position() == 0
    assert too_big.verdict is Verdict.INCONCLUSIVE
    assert too_big.reason.endswith(
        "more than the 8 KiB a run keeps, and fewer than min_cases 5 would fit"
    )


def test_a_resumed_reference_run_asks_only_the_answers_it_did_not_keep(
    store: StoreHandle,
) -> None:
    """A run of the RAG suite stopped part way keeps the answers it had; the next attempt
    asks each pool only the rest, and judges as an uninterrupted run does."""
    spec = SuiteGate.model_validate(
        {"kind": "suite", "suite": str(RAG), "rule": "no_regression", "scorer": "token_f1"}
    )
    with fleet() as (plan, stable, canary):
        canary.set_faults(unfaithful_rate=0.5)
        job = new_job(store)
        with pytest.raises(RunAbandoned):
            run(store, plan, spec, job, permits=20)
        kept_before = kept(store, "baseline") + kept(store, "canary")
        assert 0 < kept_before <= 20
        asked_before = stable.ledger.position() + canary.ledger.position()
        resumed = run(store, plan, spec, job)
        asked_again = stable.ledger.position() + canary.ledger.position() - asked_before
        uninterrupted = run(store, plan, spec, None)
    assert asked_again == 2 * 26 - kept_before
    assert resumed.verdict is Verdict.FAIL
    assert (resumed.verdict, resumed.value) == (uninterrupted.verdict, uninterrupted.value)
