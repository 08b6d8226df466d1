"""Tests of the intent log: enqueueing is idempotent by key, and outcomes are recorded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound
from rolloutd.store.models import Action
from rolloutd.store.queries import (
    bump_action_attempt,
    enqueue_actions,
    finish_action,
    pending_actions,
)
from tests.store.seed import T0, seed_rollout

WEIGHTS_5 = ("r1-abc-1-weights", "set_weights", {"canary": 5, "stable": 95})
ALERT_1 = ("r1-abc-1-alert", "alert", {"text": "step 1: 5% of sessions on the canary"})
DEPLOY = ("r1-abc-deploy-canary-0", "deploy", {"artefact_set": "seq8k", "replica": "canary-0"})


def test_enqueue_adds_only_keys_not_seen_before(session: Session) -> None:
    """Enqueueing the same keys again (a replay) adds nothing; new keys are added in order."""
    rollout_id = seed_rollout(session)
    first = enqueue_actions(session, rollout_id=rollout_id, actions=[WEIGHTS_5, ALERT_1], now=T0)
    assert [(a.key, a.kind, a.status, a.attempts) for a in first] == [
        (WEIGHTS_5[0], "set_weights", "pending", 0),
        (ALERT_1[0], "alert", "pending", 0),
    ]
    again = enqueue_actions(
        session,
        rollout_id=rollout_id,
        actions=[ALERT_1, DEPLOY, WEIGHTS_5, DEPLOY],
        now=T0 + timedelta(minutes=1),
    )
    assert [a.key for a in again] == [DEPLOY[0]]
    session.commit()
    assert [a.key for a in pending_actions(session, rollout_id)] == [
        WEIGHTS_5[0],
        ALERT_1[0],
        DEPLOY[0],
    ]
    assert again[0].payload == {"artefact_set": "seq8k", "replica": "canary-0"}


def test_keys_are_scoped_to_theirseed_rollout(session: Session) -> None:
    """Two rollouts may use the same action key; pending_actions() without a rollout sees both."""
    first, second = seed_rollout(session), seed_rollout(session, service="embedder")
    enqueue_actions(session, rollout_id=first, actions=[WEIGHTS_5], now=T0)
    enqueue_actions(session, rollout_id=second, actions=[WEIGHTS_5], now=T0 + timedelta(seconds=1))
    assert [a.rollout_id for a in pending_actions(session)] == [first, second]


def test_finished_actions_leave_the_pending_list(session: Session) -> None:
    """Done and failed actions are no longer pending and keep when and why they finished."""
    rollout_id = seed_rollout(session)
    weights, alert, deploy = enqueue_actions(
        session, rollout_id=rollout_id, actions=[WEIGHTS_5, ALERT_1, DEPLOY], now=T0
    )
    done_at = T0 + timedelta(seconds=3)
    finish_action(session, weights.id, status="done", now=done_at)
    finish_action(
        session, alert.id, status="failed", now=done_at, error="slack: 400 invalid_payload"
    )
    session.commit()
    assert [a.id for a in pending_actions(session, rollout_id)] == [deploy.id]
    failed = session.get_one(Action, alert.id)
    assert (failed.status, failed.done_at, failed.last_error) == (
        "failed",
        done_at,
        "slack: 400 invalid_payload",
    )


def test_bumping_an_attempt_counts_and_keeps_the_newest_error(session: Session) -> None:
    """Each failed attempt counts one and replaces last_error; the action stays pending."""
    rollout_id = seed_rollout(session)
    [action] = enqueue_actions(session, rollout_id=rollout_id, actions=[DEPLOY], now=T0)
    bump_action_attempt(session, action.id, error="connection refused")
    bump_action_attempt(session, action.id, error="HTTP 400 model not found")
    session.commit()
    session.expire_all()
    stored = session.get_one(Action, action.id)
    assert (stored.attempts, stored.last_error, stored.status) == (
        2,
        "HTTP 400 model not found",
        "pending",
    )


def test_finishing_or_bumping_an_unknown_action_is_not_found(session: Session) -> None:
    """Unknown action ids raise NotFound."""
    with pytest.raises(NotFound, match="no action 7"):
        finish_action(session, 7, status="done", now=T0)
    with pytest.raises(NotFound, match="no action 7"):
        bump_action_attempt(session, 7, error="x")
