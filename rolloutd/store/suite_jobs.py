"""Suite jobs: the due runs of suite gates, claimed and held like leases.

The leader writes a job when a gate's suite is due (the fact: this run should happen), and
an instance *claims* it to run it: ``acquired_by`` and ``acquired_until`` (wall clock), and
``attempts`` bumped, which is the claim's token. While it runs, the holder moves
``acquired_until`` forward; every write of the run checks the token, so a holder that lost
the job (it stalled past ``acquired_until`` and another instance claimed it) writes nothing.
Claiming is one conditional UPDATE: two instances never run the same attempt.

All writes here happen inside the caller's transaction, which the leader fences.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from rolloutd.store.suite_models import SuiteJob
from rolloutd.store.writes import add_row, rowcount

OPEN = "open"


@dataclass(frozen=True)
class Claim:
    """A job this instance holds: which one, which attempt, and until when."""

    job_id: int
    attempt: int
    holder: str
    until: datetime


def open_job(session: Session, *, rollout_id: int, gate: str) -> SuiteJob | None:
    """The gate's open job, if any."""
    return session.scalar(
        select(SuiteJob).where(
            SuiteJob.rollout_id == rollout_id, SuiteJob.gate == gate, SuiteJob.state == OPEN
        )
    )


def last_ended_at(
    session: Session, *, rollout_id: int, gate: str, step_index: int, state: str
) -> datetime | None:
    """When the gate's newest job of ``state`` in the step ended (its ``finished_at``)."""
    return session.scalar(
        select(SuiteJob.finished_at)
        .where(
            SuiteJob.rollout_id == rollout_id,
            SuiteJob.gate == gate,
            SuiteJob.step_index == step_index,
            SuiteJob.state == state,
        )
        .order_by(SuiteJob.finished_at.desc())
        .limit(1)
    )


class DueJob(TypedDict):
    """Which gate's suite is due, in which step of which rollout, and since when."""

    rollout_id: int
    gate: str
    step_index: int
    due_at: datetime


def add_job(session: Session, **due: Unpack[DueJob]) -> SuiteJob:
    """Write the fact that the gate's suite is due; nobody holds it yet."""
    return add_row(session, SuiteJob(**due, state=OPEN, attempts=0))


def claim(
    session: Session, job_id: int, *, attempts: int, holder: str, until: datetime, now: datetime
) -> Claim | None:
    """Take the open job unless another holder's claim is still live; None if it was not
    free, or was claimed again since it was read with ``attempts`` claims."""
    attempt = attempts + 1
    taken = rowcount(
        session.execute(
            update(SuiteJob)
            .where(
                SuiteJob.id == job_id,
                SuiteJob.state == OPEN,
                SuiteJob.attempts == attempts,
                or_(SuiteJob.acquired_until.is_(None), SuiteJob.acquired_until <= now),
            )
            .values(acquired_by=holder, acquired_until=until, attempts=attempt)
            .execution_options(synchronize_session=False)
        )
    )
    return Claim(job_id, attempt, holder, until) if taken == 1 else None


def extend(session: Session, held: Claim, *, until: datetime) -> Claim | None:
    """Move the claim's expiry to ``until``; None when the job is no longer ours."""
    moved = rowcount(session.execute(_ours(held).values(acquired_until=until)))
    return Claim(held.job_id, held.attempt, held.holder, until) if moved == 1 else None


def holds(session: Session, held: Claim) -> bool:
    """Whether the claim is still the job's, and the job open (locks the row until commit)."""
    query = select(SuiteJob.id).where(*_claim_is(held)).with_for_update()
    return session.scalar(query) is not None


def finish(
    session: Session, held: Claim, *, state: str, now: datetime, reason: str | None = None
) -> bool:
    """End the job (done or failed) if the claim is still ours."""
    ended = session.execute(
        _ours(held).values(state=state, finished_at=now, reason=reason, acquired_until=now)
    )
    return rowcount(ended) == 1


def release(session: Session, held: Claim, *, now: datetime, reason: str) -> bool:
    """Give the job up unfinished, so another instance may claim it at once."""
    freed = session.execute(_ours(held).values(acquired_until=now, reason=reason))
    return rowcount(freed) == 1


def end_job(session: Session, job_id: int, *, state: str, now: datetime, reason: str) -> None:
    """End an open job whoever holds it (superseded by a later step, or failed for good)."""
    session.execute(
        update(SuiteJob)
        .where(SuiteJob.id == job_id, SuiteJob.state == OPEN)
        .values(state=state, finished_at=now, reason=reason)
        .execution_options(synchronize_session=False)
    )


def _claim_is(held: Claim) -> tuple[Any, ...]:
    return (
        SuiteJob.id == held.job_id,
        SuiteJob.state == OPEN,
        SuiteJob.attempts == held.attempt,
        SuiteJob.acquired_by == held.holder,
    )


def _ours(held: Claim) -> Any:
    return update(SuiteJob).where(*_claim_is(held)).execution_options(synchronize_session=False)
