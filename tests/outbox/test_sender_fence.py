"""A sender that lost the leader lease writes nothing; the new leader delivers (at least once)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from rolloutd.alerts.webhooks import Webhooks
from rolloutd.store import lease
from rolloutd.store.lease import Held
from rolloutd.store.outbox import list_messages
from tests.outbox.harness import SlackRig
from tests.outbox.slack import SlackServer

if TYPE_CHECKING:
    from conftest import StoreHandle


class Rig(SlackRig):
    """Two channels on one Slack-like server, and a way to lose the lease mid-run."""

    def __init__(self, store: StoreHandle, slack: SlackServer) -> None:
        super().__init__(store, slack)
        self.successor: Held | None = None

    def queue(self, webhook_env: str, tag: str) -> None:
        """One message for one webhook."""
        self.enqueue(tag, webhook_env, channel=tag)

    def take_over(self) -> None:
        """Another instance takes the lease (a higher epoch); ours still looks valid to us, as
        it does to a process that was paused past its expiry."""
        if self.successor is not None:
            return
        now = self.h.clock()
        with self.h.store.sessions.begin() as session:
            assert self.h.held is not None
            lease.release(session, self.h.held, now=now)
            self.successor = lease.acquire(session, holder="other", ttl=timedelta(hours=1), now=now)
        assert self.successor is not None and self.successor.epoch > self.h.held.epoch

    def rows(self) -> list[tuple[Any, ...]]:
        """Every outbox row's delivery state."""
        with self.h.store.sessions() as session:
            return [
                (m.key, m.status, m.attempts, m.last_error, m.next_attempt_at, m.sent_at)
                for m in list_messages(session)
            ]

    def alert_events(self) -> list[str]:
        return [e["kind"] for e in self.h.events() if e["kind"].startswith("alert_")]


class LosingWebhooks(Webhooks):
    """Looking up the first URL is when the lease is lost: after the run read its queues and
    checked it leads, before it posts or writes."""

    def __init__(self, rig: Rig, environ: Mapping[str, str]) -> None:
        super().__init__("/nonexistent", environ=lambda: environ)
        self.rig = rig

    def url(self, variable: str) -> str | None:
        self.rig.take_over()
        return super().url(variable)


@pytest.fixture
def rig(store: StoreHandle) -> Iterator[Rig]:
    """A Slack-like server and a rollout harness whose sender posts to it."""
    with Rig.running(store) as rig:
        yield rig


@pytest.mark.parametrize(
    ("mode", "requests"),
    [
        ("ok", 1),  # Slack accepted: the row would be marked sent
        ("rollup_error", 1),  # 500: the row would get its next attempt time
        ("invalid_payload", 1),  # 400: the row would be given up, with an event
        ("unset", 0),  # no URL: the row would wait, with an event
    ],
)
def test_a_sender_whose_lease_was_taken_over_writes_nothing(
    rig: Rig, mode: str, requests: int
) -> None:
    """Lease lost between reading the queues and recording the outcome: no outbox row changes,
    no event is written, and the run posts nothing more."""
    if mode == "unset":
        del rig.h.environ["SLACK_WEBHOOK_OPS"]
    else:
        rig.slack.mode = mode
    rig.queue("SLACK_WEBHOOK_OPS", "ops")
    rig.queue("SLACK_WEBHOOK_ONCALL", "oncall")
    before = rig.rows()
    paused = rig.h.new_sender(timeout=0.3, webhooks=LosingWebhooks(rig, rig.h.environ))

    paused.run_once()

    assert rig.successor is not None
    assert rig.rows() == before
    assert rig.alert_events() == []
    assert len(rig.slack.requests) == requests  # the oncall message was not posted


def test_the_new_leader_repeats_a_post_the_fenced_sender_could_not_record(rig: Rig) -> None:
    """Slack accepted the ex-leader's post but the row stayed pending: the new leader posts it
    again and marks it sent. Delivery is at least once, never lost."""
    rig.queue("SLACK_WEBHOOK_OPS", "ops")
    paused = rig.h.new_sender(timeout=0.3, webhooks=LosingWebhooks(rig, rig.h.environ))
    paused.run_once()
    assert [r[1] for r in rig.rows()] == ["pending"]

    rig.h.clock.advance(seconds=1)
    leader = rig.h.new_sender(timeout=0.3, lease=lambda: rig.successor)
    assert leader.run_once() == 1

    assert [b["text"] for b in rig.slack.delivered()] == ["ops", "ops"]
    assert [r[1] for r in rig.rows()] == ["sent"]


def test_a_sender_that_lost_the_lease_before_its_run_posts_nothing(rig: Rig) -> None:
    """The queues are read under the fence: an ex-leader that still thinks it leads finds
    nothing to send, so a long pause costs no duplicate."""
    rig.queue("SLACK_WEBHOOK_OPS", "ops")
    rig.take_over()
    before = rig.rows()

    assert rig.h.sender.run_once() == 0

    assert rig.slack.requests == []
    assert rig.rows() == before


def test_a_sender_without_a_lease_posts_nothing(rig: Rig) -> None:
    """A standby (its lease is None) neither reads nor posts."""
    rig.queue("SLACK_WEBHOOK_OPS", "ops")
    standby = rig.h.new_sender(lease=lambda: None)

    assert standby.run_once() == 0

    assert rig.slack.requests == []
    assert [r[1] for r in rig.rows()] == ["pending"]
