"""One channel's backlog does not hold up another's alerts: one head per webhook, chosen in SQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from rolloutd.daemon.jobs import SEND_EVERY_SECONDS
from rolloutd.store.outbox import enqueue_message, heads_of_queues
from tests.outbox.harness import SECRET, Harness
from tests.outbox.slack import SlackServer

if TYPE_CHECKING:
    from conftest import StoreHandle

BACKLOG = 1_500


def _queue(h: Harness, count: int, *, webhook_env: str, tag: str) -> None:
    """Put ``count`` numbered messages for one webhook in the outbox, created at the clock's now."""
    with h.store.sessions.begin() as session:
        for i in range(count):
            enqueue_message(
                session,
                key=f"test/{tag}-{i}",
                rollout_id=h.rollout_id,
                topic="rollback_started",
                severity="critical",
                channel=tag,
                webhook_env=webhook_env,
                message={"text": f"{tag}-{i}", "blocks": []},
                now=h.clock(),
            )


@pytest.fixture
def slack() -> Iterator[SlackServer]:
    """A Slack-like server; its clock is set to the harness's by each test."""
    with SlackServer(clock=lambda: None) as server:  # type: ignore[arg-type, return-value]
        yield server


def test_a_backlog_on_an_unset_webhook_does_not_delay_another_channels_alert(
    store: StoreHandle, slack: SlackServer
) -> None:
    """1,500 alerts waiting on a channel with no webhook variable: another channel's alert,
    queued after them, reaches Slack within one send interval."""
    ops = slack.webhook(f"ops-{SECRET}")
    h = Harness(store, {"SLACK_WEBHOOK_OPS": ops})
    slack.clock = h.clock
    _queue(h, BACKLOG, webhook_env="SLACK_WEBHOOK_UNSET", tag="stuck")
    h.send(runs=10, every=SEND_EVERY_SECONDS)  # the backlog has been waiting a while
    h.clock.advance(seconds=1)
    queued_at = h.clock()
    _queue(h, 1, webhook_env="SLACK_WEBHOOK_OPS", tag="ops")

    h.send(runs=3, every=SEND_EVERY_SECONDS)

    arrivals = [r for r in slack.requests if r.status == 200]
    assert [r.body["text"] for r in arrivals if r.body] == ["ops-0"]
    assert arrivals[0].at - queued_at <= timedelta(seconds=SEND_EVERY_SECONDS)
    stuck = [m for m in h.outbox() if m["channel"] == "stuck"]
    assert len(stuck) == BACKLOG and {m["status"] for m in stuck} == {"pending"}


def test_heads_of_queues_returns_the_oldest_pending_message_of_every_webhook(
    store: StoreHandle,
) -> None:
    """Behind any backlog, each webhook's head is its oldest pending row; sent rows are skipped."""
    h = Harness(store, {})
    _queue(h, 3, webhook_env="SLACK_WEBHOOK_A", tag="a")
    h.clock.advance(seconds=1)
    _queue(h, BACKLOG, webhook_env="SLACK_WEBHOOK_B", tag="b")
    h.clock.advance(seconds=1)
    _queue(h, 2, webhook_env="SLACK_WEBHOOK_C", tag="c")
    with store.sessions.begin() as session:
        first_a = heads_of_queues(session)[0]
        assert first_a.message["text"] == "a-0"
        first_a.status = "sent"
    with store.sessions() as session:
        heads = [m.message["text"] for m in heads_of_queues(session)]
    assert heads == ["a-1", "b-0", "c-0"]
