"""Step progress: when each step was entered, verified on the router and completed.

These are facts about the world, recorded once: a tick that sees a weight verified again must not
move ``verified_at`` forward, so each timestamp keeps its first value.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple, NotRequired, TypedDict, Unpack

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rolloutd.store.models import StepProgress
from rolloutd.store.upserts import insert_on_conflict


class StepFacts(TypedDict):
    """One step of a rollout as its plan says, and the times it was seen to get further."""

    rollout_id: int
    step_index: int
    name: str
    kind: str
    weight: float
    entered_at: NotRequired[datetime | None]
    verified_at: NotRequired[datetime | None]
    completed_at: NotRequired[datetime | None]


def upsert_step(session: Session, **step: Unpack[StepFacts]) -> StepProgress:
    """Create or update a step's row; a timestamp already set is never overwritten."""
    table = StepProgress.__table__
    insert = insert_on_conflict(session, StepProgress).values(**step)
    session.execute(
        insert.on_conflict_do_update(
            index_elements=[table.c.rollout_id, table.c.step_index],
            set_={
                "name": insert.excluded.name,
                "kind": insert.excluded.kind,
                "weight": insert.excluded.weight,
                **{
                    column: func.coalesce(table.c[column], insert.excluded[column])
                    for column in ("entered_at", "verified_at", "completed_at")
                },
            },
        )
    )
    return session.scalars(
        select(StepProgress)
        .where(
            StepProgress.rollout_id == step["rollout_id"],
            StepProgress.step_index == step["step_index"],
        )
        .execution_options(populate_existing=True)
    ).one()


class StepTimes(NamedTuple):
    """When a step was entered, verified on the router and completed (None: not yet)."""

    entered_at: datetime | None
    verified_at: datetime | None
    completed_at: datetime | None


def steps_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, dict[int, StepTimes]]:
    """Each rollout's step times by step index, for a batch, in one statement: plain rows, not
    ORM objects (a leader keeps them for thousands of rollouts)."""
    found: dict[int, dict[int, StepTimes]] = {i: {} for i in rollout_ids}
    s = StepProgress
    query = select(s.rollout_id, s.step_index, s.entered_at, s.verified_at, s.completed_at)
    for rollout_id, index, *times in session.execute(query.where(s.rollout_id.in_(found))):
        found[rollout_id][index] = StepTimes(*times)
    return found


def list_steps(session: Session, rollout_id: int) -> list[StepProgress]:
    """Return the rollout's step rows in step order."""
    return list(
        session.scalars(
            select(StepProgress)
            .where(StepProgress.rollout_id == rollout_id)
            .order_by(StepProgress.step_index)
        )
    )
