"""Step progress: when each step was entered, verified on the router and completed.

These are facts about the world, recorded once: a tick that sees a weight verified again must not
move ``verified_at`` forward, so each timestamp keeps its first value.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NotRequired, TypedDict, Unpack

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


def steps_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, list[StepProgress]]:
    """Each rollout's step rows in step order (as :func:`list_steps`), for a batch, in one
    statement."""
    found: dict[int, list[StepProgress]] = {i: [] for i in rollout_ids}
    query = select(StepProgress).where(StepProgress.rollout_id.in_(found))
    for row in session.scalars(query.order_by(StepProgress.rollout_id, StepProgress.step_index)):
        found[row.rollout_id].append(row)
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
