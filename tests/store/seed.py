"""A rollout row to hang commands, events, actions and evaluations on in store tests."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from rolloutd.store.queries import create_rollout

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def seed_rollout(session: Session, service: str = "agent-70b", state: str = "canary") -> int:
    """Create an active rollout of ``service`` at ``T0`` and return its id."""
    return create_rollout(
        session,
        name="r",
        service=service,
        environment="prod",
        plan_hash="c" * 64,
        plan_source="",
        plan_path="plan.yaml",
        steps=1,
        progress={},
        state=state,
        actor="alice",
        now=T0,
    )
