"""Suite jobs: the due runs of suite gates, named, claimed and held like leases.

The tick writes a job when a gate's suite is due (the fact: this run should happen), under a
deterministic name (:func:`job_name`) that the database keeps unique; an instance *claims* it
to run it: ``acquired_by`` and ``acquired_until`` (wall clock), and
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

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from rolloutd.store.models import Rollout
from rolloutd.store.suite_models import SuiteJob, SuiteJobCase, SuiteSample
from rolloutd.store.upserts import insert_unless_exists
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


def newest_ended(
    session: Session, *, rollout_id: int, gate: str, step_index: int, state: str
) -> SuiteJob | None:
    """The gate's newest job in the step that ended in ``state`` (by ``finished_at``)."""
    return session.scalar(
        select(SuiteJob)
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


def job_name(*, rollout_id: int, gate: str, step_index: int, run: int) -> str:
    """The key of the gate's ``run``-th job in the step: ``rollout-3/tool_args/step-0/run-1``."""
    return f"rollout-{rollout_id}/{gate}/step-{step_index}/run-{run}"


def next_name(session: Session, **due: Unpack[DueJob]) -> str:
    """The name of the gate's next job in the step: one more than it has."""
    count = session.scalar(
        select(func.count()).where(
            SuiteJob.rollout_id == due["rollout_id"],
            SuiteJob.gate == due["gate"],
            SuiteJob.step_index == due["step_index"],
        )
    )
    return job_name(
        rollout_id=due["rollout_id"],
        gate=due["gate"],
        step_index=due["step_index"],
        run=int(count or 0) + 1,
    )


def add_job(session: Session, **due: Unpack[DueJob]) -> SuiteJob:
    """Write the fact that the gate's suite is due, as its next run; nobody holds it yet.

    :raises IntegrityError: the gate has an open job, or a job of that name exists.
    """
    return add_row(session, SuiteJob(**due, name=next_name(session, **due), state=OPEN, attempts=0))


def write_due(session: Session, **due: Unpack[DueJob]) -> int | None:
    """Like :func:`add_job`, but a job that another writer added first (an open one of the
    gate, or one of the same name) leaves this write a no-op: None, and the transaction goes
    on."""
    return insert_unless_exists(
        session,
        SuiteJob,
        **due,
        name=next_name(session, **due),
        state=OPEN,
        attempts=0,
    )


def open_jobs(session: Session) -> list[tuple[SuiteJob, Rollout]]:
    """Every open job, with its rollout (to tell whether its step or the rollout is over)."""
    rows = session.execute(
        select(SuiteJob, Rollout)
        .join(Rollout, Rollout.id == SuiteJob.rollout_id)
        .where(SuiteJob.state == OPEN)
        .order_by(SuiteJob.id)
    )
    return [(job, rollout) for job, rollout in rows]


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
    """End the job (done or failed) if the claim is still ours; its kept cases go (the runs
    are stored whole by now)."""
    ended = session.execute(
        _ours(held).values(state=state, finished_at=now, reason=reason, acquired_until=now)
    )
    if rowcount(ended) != 1:
        return False
    _forget_cases(session, held.job_id)
    return True


def release(session: Session, held: Claim, *, now: datetime, reason: str) -> bool:
    """Give the job up unfinished, so another instance may claim it at once."""
    freed = session.execute(_ours(held).values(acquired_until=now, reason=reason))
    return rowcount(freed) == 1


def end_job(session: Session, job_id: int, *, state: str, now: datetime, reason: str) -> bool:
    """End an open job whoever holds it (superseded by a later step, cancelled with its
    rollout, or failed for good), and forget its kept cases; whether it was open."""
    ended = session.execute(
        update(SuiteJob)
        .where(SuiteJob.id == job_id, SuiteJob.state == OPEN)
        .values(state=state, finished_at=now, reason=reason)
        .execution_options(synchronize_session=False)
    )
    if rowcount(ended) != 1:
        return False
    _forget_cases(session, job_id)
    return True


def sample_of(session: Session, job_id: int) -> SuiteSample | None:
    """The live traffic the job sampled, if it has."""
    return session.scalar(select(SuiteSample).where(SuiteSample.job_id == job_id))


def keep_sample(session: Session, sample: SuiteSample) -> SuiteSample:
    """Keep the job's sample (once: a second one for the job is refused by the database)."""
    return add_row(session, sample)


def newest_unusable_sample(session: Session, *, rollout_id: int, gate: str) -> SuiteSample | None:
    """The gate's newest sample that gave no usable suite (its ``reason`` says why)."""
    return session.scalar(
        select(SuiteSample)
        .join(SuiteJob, SuiteJob.id == SuiteSample.job_id)
        .where(
            SuiteJob.rollout_id == rollout_id,
            SuiteJob.gate == gate,
            SuiteSample.reason.is_not(None),
        )
        .order_by(SuiteSample.sampled_at.desc(), SuiteSample.id.desc())
        .limit(1)
    )


def _forget_cases(session: Session, job_id: int) -> None:
    session.execute(delete(SuiteJobCase).where(SuiteJobCase.job_id == job_id))


def _claim_is(held: Claim) -> tuple[Any, ...]:
    return (
        SuiteJob.id == held.job_id,
        SuiteJob.state == OPEN,
        SuiteJob.attempts == held.attempt,
        SuiteJob.acquired_by == held.holder,
    )


def _ours(held: Claim) -> Any:
    return update(SuiteJob).where(*_claim_is(held)).execution_options(synchronize_session=False)
