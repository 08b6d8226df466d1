"""Tests of the audit log: ordered, and replays never record an event twice."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

from sqlalchemy.orm import Session

from rolloutd.store.queries import append_event, list_events
from tests.store.seed import T0, seed_rollout


def test_events_with_the_same_dedup_key_are_recorded_once(session: Session) -> None:
    """Appending an event whose (rollout, dedup_key) exists returns False and adds nothing."""
    rollout_id = seed_rollout(session)
    later = T0 + timedelta(minutes=1)
    append = partial(append_event, session, rollout_id=rollout_id, actor="rolloutd", now=later)
    assert append(kind="step", detail="entered step 1", dedup_key="step-1")
    assert not append(kind="step", detail="entered step 1 (replay)", dedup_key="step-1")
    # The surrounding transaction survived the duplicate: more writes and the commit still work.
    assert append(kind="note", detail="after", data={"n": 1})
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
    append = partial(append_event, session, rollout_id=None, actor="host-a", now=T0)
    assert append(kind="leader", detail="became leader", dedup_key="epoch-7")
    assert not append(kind="leader", detail="became leader", dedup_key="epoch-7")
    assert append(kind="note", detail="no key")
    assert append(kind="note", detail="no key")
    session.commit()
    assert [e.kind for e in list_events(session, None)] == ["leader", "note", "note"]


def test_events_are_listed_oldest_first(session: Session) -> None:
    """list_events orders by time, not by insertion."""
    rollout_id = seed_rollout(session)
    append = partial(append_event, session, rollout_id=rollout_id, actor="a", detail="")
    append(kind="late", now=T0 + timedelta(hours=2))
    append(kind="early", now=T0 + timedelta(hours=1))
    assert [e.kind for e in list_events(session, rollout_id)] == ["created", "early", "late"]
