"""Tests of step progress: timestamps are facts recorded once, never moved."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

from sqlalchemy.orm import Session

from rolloutd.store.queries import list_steps, upsert_step
from tests.store.seed import T0, seed_rollout


def test_step_timestamps_keep_their_first_value(session: Session) -> None:
    """Later upserts fill empty timestamps but never overwrite one already set."""
    rollout_id = seed_rollout(session)
    entered, verified, again = (T0 + timedelta(minutes=m) for m in (1, 2, 30))
    canary_5 = partial(
        upsert_step,
        session,
        rollout_id=rollout_id,
        step_index=1,
        name="canary-5",
        kind="weight",
        weight=5,
    )
    step = canary_5(entered_at=entered)
    assert (step.entered_at, step.verified_at, step.completed_at) == (entered, None, None)

    step = canary_5(entered_at=again, verified_at=verified)
    assert (step.entered_at, step.verified_at) == (entered, verified)

    step = canary_5(verified_at=again, completed_at=again)
    assert (step.entered_at, step.verified_at, step.completed_at) == (entered, verified, again)


def test_steps_are_listed_in_step_order(session: Session) -> None:
    """list_steps returns one row per step, ordered by index, with the weights given."""
    rollout_id = seed_rollout(session)
    for index, weight in ((2, 25.0), (0, 0.0), (1, 5.0)):
        upsert_step(
            session,
            rollout_id=rollout_id,
            step_index=index,
            name=f"s{index}",
            kind="weight",
            weight=weight,
            entered_at=T0,
        )
    session.commit()
    assert [(s.step_index, s.weight) for s in list_steps(session, rollout_id)] == [
        (0, 0.0),
        (1, 5.0),
        (2, 25.0),
    ]
