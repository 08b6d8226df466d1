"""Suite jobs: named runs, one open job per gate, one live claim per job, a lost claim writes
nothing, and a job's kept cases go with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from rolloutd.evaluation import records
from rolloutd.evaluation.compare import CaseResult
from rolloutd.store import suite_jobs
from rolloutd.store.suite_models import SuiteJob, SuiteSample

from .seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOLD = timedelta(seconds=70)


def _job(store: StoreHandle) -> tuple[int, int]:
    with store.sessions.begin() as session:
        rollout = seed_rollout(session)
        job = suite_jobs.add_job(
            session, rollout_id=rollout, gate="tool_args", step_index=0, due_at=T0
        )
        return rollout, job.id


def _claim(store: StoreHandle, job_id: int, holder: str, now: datetime) -> suite_jobs.Claim | None:
    with store.sessions.begin() as session:
        job = suite_jobs.open_job(session, rollout_id=1, gate="tool_args")
        assert job is not None and job.id == job_id
        return suite_jobs.claim(
            session, job_id, attempts=job.attempts, holder=holder, until=now + HOLD, now=now
        )


def test_a_gate_has_at_most_one_open_job(store: StoreHandle) -> None:
    """A second open job for the same gate is refused by the database; an ended one is not."""
    rollout, job_id = _job(store)
    with pytest.raises(IntegrityError), store.sessions.begin() as session:
        suite_jobs.add_job(session, rollout_id=rollout, gate="tool_args", step_index=0, due_at=T0)
    with store.sessions.begin() as session:
        suite_jobs.end_job(session, job_id, state="superseded", now=T0, reason="step 1 began")
        suite_jobs.add_job(session, rollout_id=rollout, gate="tool_args", step_index=1, due_at=T0)


def test_a_live_claim_keeps_others_out_until_it_lapses_and_then_one_takes_it(
    store: StoreHandle,
) -> None:
    """While ``a`` holds the job nobody else claims it; after ``acquired_until`` exactly one
    claim succeeds, with the next attempt number."""
    _, job_id = _job(store)
    first = _claim(store, job_id, "a", T0)
    assert first is not None and first.attempt == 1
    assert _claim(store, job_id, "b", T0 + HOLD - timedelta(seconds=1)) is None
    lapsed = T0 + HOLD
    second = _claim(store, job_id, "b", lapsed)
    assert second is not None and second.attempt == 2
    assert _claim(store, job_id, "c", lapsed + HOLD) is not None  # b's lapsed in turn
    with store.sessions.begin() as session:
        # A stale read of the job (one claim behind) claims nothing.
        stale = suite_jobs.claim(
            session, job_id, attempts=1, holder="d", until=T0 + 9 * HOLD, now=T0 + 9 * HOLD
        )
    assert stale is None


def test_a_holder_that_lost_its_claim_can_neither_renew_nor_finish(store: StoreHandle) -> None:
    """After a takeover the old holder's claim is dead for every write."""
    _, job_id = _job(store)
    old = _claim(store, job_id, "a", T0)
    assert old is not None
    new = _claim(store, job_id, "b", T0 + HOLD)
    assert new is not None
    with store.sessions.begin() as session:
        assert not suite_jobs.holds(session, old)
        assert suite_jobs.extend(session, old, until=T0 + 3 * HOLD) is None
        assert not suite_jobs.finish(session, old, state="done", now=T0 + HOLD)
        assert not suite_jobs.release(session, old, now=T0 + HOLD, reason="stopped")
        assert suite_jobs.holds(session, new)
        assert suite_jobs.finish(session, new, state="done", now=T0 + HOLD)
        assert suite_jobs.open_job(session, rollout_id=1, gate="tool_args") is None


def test_a_released_claim_can_be_taken_at_once(store: StoreHandle) -> None:
    """Releasing (a stopping daemon) frees the job before its claim would have lapsed."""
    _, job_id = _job(store)
    held = _claim(store, job_id, "a", T0)
    assert held is not None
    with store.sessions.begin() as session:
        assert suite_jobs.release(session, held, now=T0 + timedelta(seconds=1), reason="stopped")
    taken = _claim(store, job_id, "b", T0 + timedelta(seconds=1))
    assert taken is not None and taken.attempt == 2


def test_jobs_are_named_by_rollout_gate_step_and_run(store: StoreHandle) -> None:
    """The k-th job of a gate in a step is ``run-k``; a new step counts from 1 again."""
    rollout, first = _job(store)
    with store.sessions.begin() as session:
        suite_jobs.end_job(session, first, state="done", now=T0, reason="ran")
        second = suite_jobs.add_job(
            session, rollout_id=rollout, gate="tool_args", step_index=0, due_at=T0
        )
        suite_jobs.end_job(session, second.id, state="superseded", now=T0, reason="step 1")
        third = suite_jobs.add_job(
            session, rollout_id=rollout, gate="tool_args", step_index=1, due_at=T0
        )
        names = session.scalars(select(SuiteJob.name).order_by(SuiteJob.id)).all()
        assert third.name == names[-1]
    assert names == [
        f"rollout-{rollout}/tool_args/step-0/run-1",
        f"rollout-{rollout}/tool_args/step-0/run-2",
        f"rollout-{rollout}/tool_args/step-1/run-1",
    ]


def test_a_second_writer_of_the_same_due_run_writes_nothing(store: StoreHandle) -> None:
    """Two writers that read the same state write one job: the second ``write_due`` is a
    no-op (the open job and the name are taken) and its transaction goes on."""
    rollout, job_id = _job(store)
    with store.sessions.begin() as session:
        again = suite_jobs.write_due(
            session, rollout_id=rollout, gate="tool_args", step_index=0, due_at=T0
        )
        assert again is None
        seed_rollout(session, service="still-writing")  # the transaction is usable
    with store.sessions.begin() as session:
        rows = session.execute(select(SuiteJob.id, SuiteJob.name)).all()
        # A name taken by an ended job is refused too, even with no job open.
        session.execute(update(SuiteJob).values(state="done"))
        session.execute(update(SuiteJob).values(name=f"rollout-{rollout}/tool_args/step-0/run-2"))
        assert (
            suite_jobs.write_due(
                session, rollout_id=rollout, gate="tool_args", step_index=0, due_at=T0
            )
            is None
        )
    assert [tuple(row) for row in rows] == [(job_id, f"rollout-{rollout}/tool_args/step-0/run-1")]


def test_open_jobs_come_with_their_rollouts(store: StoreHandle) -> None:
    """The evaluation reconciler reads every open job and its rollout in one query."""
    rollout, job_id = _job(store)
    with store.sessions.begin() as session:
        found = suite_jobs.open_jobs(session)
        assert [(job.id, row.id) for job, row in found] == [(job_id, rollout)]
        suite_jobs.end_job(session, job_id, state="cancelled", now=T0, reason="rolled back")
        assert suite_jobs.open_jobs(session) == []


def test_ending_a_job_forgets_its_kept_cases_and_keeps_its_sample(store: StoreHandle) -> None:
    """Kept case results live only while the job is open; its sample stays (once per job)."""
    _, job_id = _job(store)
    case = CaseResult("c1", "correct", "get_weather", True, True, True)
    with store.sessions.begin() as session:
        records.keep_cases(
            session, job_id=job_id, suite_sha256="a" * 64, role="canary", cases=[(0, case)], now=T0
        )
        suite_jobs.keep_sample(session, _sample(job_id))
    with store.sessions.begin() as session:
        assert records.kept_cases(session, job_id=job_id, suite_sha256="a" * 64, role="canary") == {
            0: case
        }
        assert suite_jobs.end_job(session, job_id, state="superseded", now=T0, reason="step 1")
        assert not suite_jobs.end_job(session, job_id, state="cancelled", now=T0, reason="again")
    with store.sessions.begin() as session:
        assert (
            records.kept_cases(session, job_id=job_id, suite_sha256="a" * 64, role="canary") == {}
        )
        assert suite_jobs.sample_of(session, job_id) is not None
    with pytest.raises(IntegrityError), store.sessions.begin() as session:
        suite_jobs.keep_sample(session, _sample(job_id))


def test_finishing_a_job_forgets_its_kept_cases_only_for_its_holder(store: StoreHandle) -> None:
    """A lost claim cannot finish the job, so the new holder's kept cases stay."""
    _, job_id = _job(store)
    old = _claim(store, job_id, "a", T0)
    new = _claim(store, job_id, "b", T0 + HOLD)
    assert old is not None and new is not None
    case = CaseResult("c1", "request_error", "get_weather", None, None, None, error="timed out")
    with store.sessions.begin() as session:
        records.keep_cases(
            session,
            job_id=job_id,
            suite_sha256="a" * 64,
            role="baseline",
            cases=[(3, case)],
            now=T0,
        )
        assert not suite_jobs.finish(session, old, state="done", now=T0 + HOLD)
        assert records.kept_cases(
            session, job_id=job_id, suite_sha256="a" * 64, role="baseline"
        ) == {3: case}
        assert suite_jobs.finish(session, new, state="done", now=T0 + HOLD)
        assert (
            records.kept_cases(session, job_id=job_id, suite_sha256="a" * 64, role="baseline") == {}
        )


def _sample(job_id: int) -> SuiteSample:
    return SuiteSample(
        job_id=job_id,
        capture="/var/lib/agent-gateway/capture",
        since=T0 - timedelta(days=1),
        until=T0,
        seed=7,
        kept=0,
        report={"kept": 0, "dropped": {"no tool call": 3}},
        size=0,
        reason="live sample: too few",
        sampled_at=T0,
    )
