"""Suite jobs: one open job per gate, one live claim per job, and a lost claim writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.exc import IntegrityError

from rolloutd.store import suite_jobs

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
