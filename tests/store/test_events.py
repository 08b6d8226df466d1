"""Tests of the audit log: ordered, and replays never record an event twice."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from rolloutd.store.queries import append_event, list_events
from tests.store.seed import T0, seed_rollout


def test_events_with_the_same_dedup_key_are_recorded_once(session: Session) -> None:
    """Appending an event whose (rollout, dedup_key) exists returns False and adds nothing."""
    rollout_id = seed_rollout(session)
    later = T0 + timedelta(minutes=1)
    assert append_event(
        session,
        rollout_id=rollout_id,
        kind="step",
        actor="rolloutd",
        detail="entered step 1",
        now=later,
        dedup_key="step-1",
    )
    assert not append_event(
        session,
        rollout_id=rollout_id,
        kind="step",
        actor="rolloutd",
        detail="entered step 1 (replay)",
        now=later,
        dedup_key="step-1",
    )
    # The surrounding transaction survived the duplicate: more writes and the commit still work.
    assert append_event(
        session,
        rollout_id=rollout_id,
        kind="note",
        actor="rolloutd",
        detail="after",
        data={"n": 1},
        now=later,
    )
    session.commit()
    kinds = [(e.kind, e.detail) for e in list_events(session, rollout_id)]
    assert kinds == [
        ("created", "created r for agent-70b/prod from plan.yaml"),
        ("step", "entered step 1"),
        ("note", "after"),
    ]


def test_dedup_keys_are_scoped_to_theirseed_rollout(session: Session) -> None:
    """The same dedup key on two rollouts records two events."""
    first, second = seed_rollout(session), seed_rollout(session, service="embedder")
    for rollout_id in (first, second):
        assert append_event(
            session,
            rollout_id=rollout_id,
            kind="step",
            actor="rolloutd",
            detail="",
            now=T0,
            dedup_key="step-1",
        )


def test_daemon_level_events_are_deduplicated_too(session: Session) -> None:
    """Events without a rollout (leadership) honour their dedup key despite the null rollout."""
    assert append_event(
        session,
        rollout_id=None,
        kind="leader",
        actor="host-a",
        detail="became leader",
        now=T0,
        dedup_key="epoch-7",
    )
    assert not append_event(
        session,
        rollout_id=None,
        kind="leader",
        actor="host-a",
        detail="became leader",
        now=T0,
        dedup_key="epoch-7",
    )
    assert append_event(
        session, rollout_id=None, kind="note", actor="host-a", detail="no key", now=T0
    )
    assert append_event(
        session, rollout_id=None, kind="note", actor="host-a", detail="no key", now=T0
    )
    session.commit()
    assert [e.kind for e in list_events(session, None)] == ["leader", "note", "note"]


def test_events_are_listed_oldest_first(session: Session) -> None:
    """list_events orders by time, not by insertion."""
    rollout_id = seed_rollout(session)
    append_event(
        session,
        rollout_id=rollout_id,
        kind="late",
        actor="a",
        detail="",
        now=T0 + timedelta(hours=2),
    )
    append_event(
        session,
        rollout_id=rollout_id,
        kind="early",
        actor="a",
        detail="",
        now=T0 + timedelta(hours=1),
    )
    assert [e.kind for e in list_events(session, rollout_id)] == ["created", "early", "late"]
