"""An alert is built when it is decided and written once: performing it queues the messages
its action row carries, reading no rollout and parsing no plan."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event, select, update

from rolloutd import operations
from rolloutd.alerts.slack import render_text
from rolloutd.planfile import LoadedPlan, parse_plan
from rolloutd.reconcile.perform import Performer
from rolloutd.store import queries
from rolloutd.store.models import Action
from tests.outbox.harness import Harness, queued_for

if TYPE_CHECKING:
    from conftest import StoreHandle

_READS_ROLLOUTS = re.compile(r"\bFROM rollouts\b")


def _held_back_breach(h: Harness, monkeypatch: pytest.MonkeyPatch) -> Action:
    """Breach the canary with the performer held back: the rollback alert is decided and
    its action left pending, as a crash right after the decision's commit leaves it."""
    h.tick()
    h.metrics.set("queue_timeout_rate", "canary", 0.062, samples=900)
    with monkeypatch.context() as held_back:
        held_back.setattr(Performer, "attempt", lambda *_, **__: False)
        assert h.tick(seconds=5) == "rolling_back"
    (pending,) = [a for a in _alerts(h) if a.key.startswith("alert/rollback_started/")]
    assert pending.status == "pending"
    assert h.outbox() == []
    return pending


def _alerts(h: Harness) -> list[Action]:
    with h.store.sessions() as session:
        query = select(Action).where(Action.rollout_id == h.rollout_id, Action.kind == "alert")
        return list(session.scalars(query.order_by(Action.id)))


def _store_payload(h: Harness, action: Action, payload: dict[str, Any]) -> None:
    with h.store.sessions.begin() as session:
        session.execute(update(Action).where(Action.id == action.id).values(payload=payload))


def _queued(h: Harness, action: Action) -> list[dict[str, Any]]:
    return queued_for(h.store, h.rollout_id, action.key)


@dataclass
class Watched:
    """What the performer did while it performed."""

    rollout_reads: list[str] = field(default_factory=list)
    parsed: list[str] = field(default_factory=list)


@contextmanager
def _watching_the_performer(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Watched]:
    """Record each statement that reads the rollouts table and each plan parsed while
    :meth:`Performer.attempt` runs (no plan is cached, so reading one would parse it)."""
    watched = Watched()
    performing = False

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if performing and _READS_ROLLOUTS.search(statement):
            watched.rollout_reads.append(statement)

    def counting(text: str, source: str, **how: Any) -> LoadedPlan:
        if performing:
            watched.parsed.append(source)
        return parse_plan(text, source, **how)

    attempt = Performer.attempt

    def watched_attempt(*args: Any, **kwargs: Any) -> bool:
        nonlocal performing
        performing = True
        try:
            return attempt(*args, **kwargs)
        finally:
            performing = False

    monkeypatch.setattr(operations, "_plans", type(operations._plans)())
    monkeypatch.setattr(operations, "parse_plan", counting)
    monkeypatch.setattr(Performer, "attempt", watched_attempt)
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield watched
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def test_performing_an_alert_queues_its_stored_messages_and_reads_no_rollout_or_plan(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replayed rollback alert queues exactly the messages its action row carries (here
    marked, to tell them from rebuilt ones), reading no rollout and parsing no plan."""
    h = Harness(store, {})
    pending = _held_back_breach(h, monkeypatch)
    payload = dict(pending.payload)
    marked = [
        {**m, "message": {**m["message"], "text": "as decided: " + m["message"]["text"]}}
        for m in payload["messages"]
    ]
    _store_payload(h, pending, {**payload, "messages": marked})
    with _watching_the_performer(store, monkeypatch) as watched:
        h.tick(seconds=5)
    assert [m["channel"] for m in marked] == ["ops", "oncall"]
    assert _queued(h, pending) == marked
    assert watched.rollout_reads == []
    assert watched.parsed == []
    (done,) = [a for a in _alerts(h) if a.id == pending.id]
    assert done.status == "done"


def test_an_alert_written_without_its_messages_is_built_and_delivered_when_performed(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An alert row an older rolloutd wrote (no messages in its payload) is still delivered:
    its messages are built from what the tick knows of the rollout, as they were decided,
    reading no rollout and parsing no plan."""
    h = Harness(store, {})
    pending = _held_back_breach(h, monkeypatch)
    written = {k: v for k, v in pending.payload.items() if k != "messages"}
    _store_payload(h, pending, written)
    with _watching_the_performer(store, monkeypatch) as watched:
        h.tick(seconds=5)
    queued = _queued(h, pending)
    assert [(m["channel"], m["severity"]) for m in queued] == [
        ("ops", "critical"),
        ("oncall", "critical"),
    ]
    text = render_text(queued[0]["message"])
    assert f"(rollout {h.rollout_id})" in text
    assert "Step*: 1 of 4 canary 5%" in text
    assert "0.062 vs <= 0.01" in text
    assert watched.rollout_reads == []
    assert watched.parsed == []


def test_performing_an_alert_again_adds_no_second_message(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An alert action performed twice (its row reopened, as after a crash before it was
    marked done) queues its stored messages once."""
    h = Harness(store, {})
    pending = _held_back_breach(h, monkeypatch)
    h.tick(seconds=5)
    first = h.outbox()
    assert _queued(h, pending) == pending.payload["messages"]
    with h.store.sessions.begin() as session:
        queries.reopen_action(session, pending.id)
    h.tick(seconds=5)
    assert h.outbox() == first
    (done,) = [a for a in _alerts(h) if a.id == pending.id]
    assert done.status == "done"
