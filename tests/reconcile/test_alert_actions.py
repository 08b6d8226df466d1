"""An alert carries what it needs when it is decided: its action row holds the routed Slack
messages, built in the transaction that decides it, and performing it queues exactly those."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from rolloutd.alerts.slack import render_text
from rolloutd.errors import PermanentError
from rolloutd.routers.base import MemoryRouter
from rolloutd.store.models import Action
from tests.outbox.harness import PLAN as ALERTING
from tests.outbox.harness import queued_for
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


def _alert(h: Harness, prefix: str) -> Action:
    with h.store.sessions() as session:
        query = select(Action).where(Action.rollout_id == h.rollout_id, Action.kind == "alert")
        (action,) = [a for a in session.scalars(query) if a.key.startswith(prefix)]
        return action


def _queued(h: Harness, action: Action) -> list[dict[str, Any]]:
    return queued_for(h.store, h.rollout_id, action.key)


def test_a_decided_alert_carries_its_routed_messages_in_its_action(store: StoreHandle) -> None:
    """The rollback alert's action holds one message per routed channel (the critical one
    reaches oncall too), saying which rollout, step and gate; the outbox holds exactly those."""
    h = Harness(store, plan=ALERTING)
    h.tick()
    h.metrics.set("queue_timeout_rate", "canary", 0.062, samples=900)
    assert h.tick(seconds=5) == "rolling_back"
    action = _alert(h, "alert/rollback_started/")
    payload = action.payload
    assert (payload["topic"], payload["severity"], payload["gate"]) == (
        "rollback_started",
        "critical",
        "queue_timeouts",
    )
    messages = payload["messages"]
    assert [(m["channel"], m["webhook_env"], m["severity"]) for m in messages] == [
        ("ops", "SLACK_WEBHOOK_OPS", "critical"),
        ("oncall", "SLACK_WEBHOOK_ONCALL", "critical"),
    ]
    text = render_text(messages[0]["message"])
    assert f"(rollout {h.rollout_id})" in text
    assert "Step*: 1 of 4 canary 5%" in text
    assert "0.062 vs <= 0.01" in text
    assert _queued(h, action) == messages
    assert action.status == "done"


class RefusingRouter(MemoryRouter):
    """A load balancer that refuses every change to 25%."""

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        if weight == 25:
            raise PermanentError("No such server: llm/gpu-d")
        super().set_weight(weight, mirror=mirror)


def test_a_stuck_action_alert_carries_its_messages_and_queues_them(store: StoreHandle) -> None:
    """A weight the router refuses raises the ``action_stuck`` alert with its messages built
    when it is written; the next tick queues exactly those, once."""
    h = Harness(store, router=RefusingRouter(), plan=ALERTING)
    h.tick()
    h.tick(seconds=5)
    assert h.tick(hours=48) == "running"
    stuck = _alert(h, "alert/stuck/")
    messages = stuck.payload["messages"]
    assert [(m["channel"], m["severity"]) for m in messages] == [
        ("ops", "critical"),
        ("oncall", "critical"),
    ]
    text = render_text(messages[0]["message"])
    assert "keeps failing: No such server: llm/gpu-d" in text
    assert f"rolloutctl status {h.rollout_id} --watch" in text
    for _ in range(3):
        h.tick(seconds=30)
    assert _queued(h, stuck) == messages
    assert _alert(h, "alert/stuck/").status == "done"
