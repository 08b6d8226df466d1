"""The sender against a Slack-like server: every answer Slack gives, hangs, pace and crashes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from structlog.testing import capture_logs

from rolloutd.alerts.sender import BACKOFF_CAP, classify
from tests.outbox.harness import SECRET, Harness, SlackRig
from tests.outbox.slack import SlackServer

if TYPE_CHECKING:
    from conftest import StoreHandle


class Rig(SlackRig):
    """A harness whose two channels point at one Slack-like server."""

    def queue(self, count: int, *, webhook_env: str = "SLACK_WEBHOOK_OPS", tag: str = "m") -> None:
        """Put ``count`` numbered messages in the outbox for one webhook."""
        channel = webhook_env.removeprefix("SLACK_WEBHOOK_").lower()
        for i in range(count):
            self.enqueue(f"{tag}-{i}", webhook_env, channel)

    def statuses(self) -> list[str]:
        return [m["status"] for m in self.h.outbox()]


@pytest.fixture
def rig(store: StoreHandle) -> Iterator[Rig]:
    """A Slack-like server and a rollout harness whose sender posts to it."""
    with Rig.running(store) as rig:
        yield rig


def test_a_message_slack_accepts_is_marked_sent(rig: Rig) -> None:
    """Slack answers ok: the body arrives as written and the row is marked sent."""
    rig.queue(1)
    assert rig.h.send() == 1
    assert [b["text"] for b in rig.slack.delivered()] == ["m-0"]
    assert rig.statuses() == ["sent"]


def test_the_sender_keeps_slacks_pace_and_the_order(rig: Rig) -> None:
    """Six messages to one webhook arrive in order, at least a second apart: Slack never 429s."""
    rig.queue(6)
    rig.h.send(runs=40, every=0.25)
    arrivals = [r for r in rig.slack.requests if r.path.endswith(f"ops-{SECRET}")]
    assert [r.body["text"] for r in arrivals if r.body] == [f"m-{i}" for i in range(6)]
    gaps = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(arrivals)]
    assert min(gaps) >= 1.0
    assert rig.slack.answered(429) == 0


def test_429_rests_the_webhook_for_retry_after_then_delivers(rig: Rig) -> None:
    """On 429 the webhook is left alone for Retry-After seconds; the message is not lost."""
    rig.slack.retry_after = 5
    rig.slack.mode = "rate_limited"
    rig.queue(1)
    rig.h.send()
    rig.slack.mode = "ok"
    rig.h.send(runs=10, every=0.49)  # 4.41 s later: still resting
    assert rig.slack.answered(429) == 1 and rig.slack.answered(200) == 0
    rig.h.clock.advance(seconds=0.6)
    rig.h.send()
    assert rig.slack.answered(200) == 1
    assert rig.statuses() == ["sent"]


@pytest.mark.parametrize("mode", ["rollup_error", "hang"])
def test_5xx_and_hangs_are_retried_with_backoff(rig: Rig, mode: str) -> None:
    """A 500 or a request that never answers is retried at 2 s, 4 s, 8 s ... and then sent."""
    rig.slack.mode = mode
    rig.queue(1)
    rig.h.send(runs=30, every=1.0)  # 30 s of trouble
    tries = rig.h.outbox()[0]["attempts"]
    assert 3 <= tries <= 5  # 0, 2, 6, 14, 30: backoff, not hammering
    assert rig.statuses() == ["pending"]
    rig.slack.mode = "ok"
    rig.slack.release.set()
    rig.h.send(runs=int(BACKOFF_CAP.total_seconds()) + 2, every=1.0)
    assert rig.statuses() == ["sent"]
    assert [b["text"] for b in rig.slack.delivered()] == ["m-0"]


@pytest.mark.parametrize(
    ("mode", "status"),
    [
        ("invalid_payload", 400),
        ("action_prohibited", 403),
        ("channel_not_found", 404),
        ("no_service", 404),
        ("channel_is_archived", 410),
    ],
)
def test_permanent_4xx_gives_up_with_an_event_that_names_the_answer(
    rig: Rig, mode: str, status: int
) -> None:
    """Slack refusing for good: the message is given up, once, and an event says why."""
    rig.slack.mode = mode
    rig.queue(1)
    rig.queue(1, tag="next")
    rig.h.send(runs=4, every=1.0)
    assert rig.statuses() == ["failed", "failed"]
    assert len(rig.slack.requests) == 2  # one try each, no retries
    undeliverable = [e for e in rig.h.events() if e["kind"] == "alert_undeliverable"]
    assert len(undeliverable) == 2
    assert f"{status} {mode}" in undeliverable[0]["detail"]
    assert "SLACK_WEBHOOK_OPS" in undeliverable[0]["detail"]


def test_a_wrong_webhook_path_is_no_service_and_does_not_block_other_channels(rig: Rig) -> None:
    """A webhook Slack does not know fails alone; another channel's messages still arrive."""
    rig.h.environ["SLACK_WEBHOOK_OPS"] = rig.ops_url + "-revoked"
    rig.queue(2)
    rig.queue(2, webhook_env="SLACK_WEBHOOK_ONCALL", tag="oncall")
    rig.h.send(runs=6, every=1.0)
    by_channel = {(m["channel"], m["status"]) for m in rig.h.outbox()}
    assert by_channel == {("ops", "failed"), ("oncall", "sent")}
    assert [b["text"] for b in rig.slack.delivered()] == ["oncall-0", "oncall-1"]


def test_a_malformed_webhook_url_gives_the_message_up_naming_the_variable(rig: Rig) -> None:
    """A webhook URL httpx cannot even parse (a broken IPv6 host) fails the message, with
    an event naming the variable and nothing of the URL; the sender goes on."""
    rig.h.environ["SLACK_WEBHOOK_OPS"] = f"http://[::1/services/T0/B0/{SECRET}"
    rig.queue(1)
    rig.queue(1, webhook_env="SLACK_WEBHOOK_ONCALL", tag="oncall")
    rig.h.send(runs=4, every=1.0)
    by_channel = {(m["channel"], m["status"]) for m in rig.h.outbox()}
    assert by_channel == {("ops", "failed"), ("oncall", "sent")}
    (undeliverable,) = [e for e in rig.h.events() if e["kind"] == "alert_undeliverable"]
    assert "SLACK_WEBHOOK_OPS" in undeliverable["detail"]
    assert "not a valid URL" in undeliverable["detail"]
    assert SECRET not in undeliverable["detail"] + str(rig.h.outbox())


def test_an_unreachable_slack_is_retried_until_it_is_back(store: StoreHandle) -> None:
    """Connection refused (nothing listening) is a network error: the message waits."""
    with SlackServer(clock=lambda: None) as slack:  # type: ignore[arg-type, return-value]
        url = slack.webhook(SECRET)
        port = url.split(":")[2].split("/")[0]
    # The server is gone: its port refuses connections.
    h = Harness(store, {"SLACK_WEBHOOK_OPS": url, "SLACK_WEBHOOK_ONCALL": url})
    rig_queue = Rig.queue
    rig = Rig.__new__(Rig)
    rig.h = h
    rig_queue(rig, 1)
    h.send(runs=10, every=1.0)
    row = h.outbox()[0]
    assert row["status"] == "pending" and row["attempts"] >= 2
    assert "ConnectError" in row["last_error"]
    assert port not in row["last_error"] and SECRET not in row["last_error"]


def test_an_unset_webhook_variable_keeps_the_alert_until_it_is_set(rig: Rig) -> None:
    """No URL for the channel: the alert waits (with an event saying which variable), then goes."""
    del rig.h.environ["SLACK_WEBHOOK_OPS"]
    rig.queue(1)
    rig.h.send(runs=5, every=1.0)
    assert rig.statuses() == ["pending"]
    waiting = [e for e in rig.h.events() if e["kind"] == "alert_waiting"]
    assert len(waiting) == 1
    assert "SLACK_WEBHOOK_OPS is not set" in waiting[0]["detail"]
    rig.h.environ["SLACK_WEBHOOK_OPS"] = rig.ops_url
    rig.h.send(runs=65, every=1.0)
    assert rig.statuses() == ["sent"]


class Crash(BaseException):
    """The process dies (as with SIGKILL) right after Slack answered."""


def test_a_crash_between_sending_and_marking_sent_repeats_but_never_loses(rig: Rig) -> None:
    """Killed after Slack said ok: a restarted sender sends the message again; none is lost."""
    rig.queue(2)

    def die(response: httpx.Response) -> None:
        raise Crash

    doomed = rig.h.new_sender(client=httpx.Client(event_hooks={"response": [die]}))
    with pytest.raises(Crash):
        doomed.run_once()
    assert [b["text"] for b in rig.slack.delivered()] == ["m-0"]
    assert rig.statuses() == ["pending", "pending"]
    rig.h.clock.advance(seconds=1)  # a restart takes a while
    rig.h.sender = rig.h.new_sender()
    rig.h.send(runs=6, every=0.5)
    assert [b["text"] for b in rig.slack.delivered()] == ["m-0", "m-0", "m-1"]
    assert rig.statuses() == ["sent", "sent"]


def test_the_webhook_url_never_appears_in_logs_events_or_rows(rig: Rig) -> None:
    """Every failure mode logged and recorded; the URL's secret part shows up nowhere."""
    rig.queue(1, tag="a")
    with capture_logs() as logs:
        for mode in ("rollup_error", "rate_limited", "ok"):
            rig.slack.mode = mode
            rig.h.send(runs=70, every=1.0)
        rig.slack.mode = "invalid_payload"
        rig.queue(1, tag="b")
        rig.h.send(runs=3, every=1.0)
        del rig.h.environ["SLACK_WEBHOOK_OPS"]
        rig.queue(1, tag="c")
        rig.h.send(runs=3, every=1.0)
    assert {m["status"] for m in rig.h.outbox()} == {"sent", "failed", "pending"}
    everything = repr(logs) + repr(rig.h.events()) + repr(rig.h.outbox())
    assert logs and SECRET not in everything
    assert "/services/" not in everything


def test_classify_reads_slacks_answers() -> None:
    """2xx is sent, 429 rests for Retry-After, 5xx retries, any other 4xx is final."""
    assert classify(200, "ok", None).outcome == "sent"
    limited = classify(429, "rate_limited", "30")
    assert limited.outcome == "rate_limited" and limited.rest.total_seconds() == 30
    assert classify(429, "", "soon").rest.total_seconds() == 1.0
    assert classify(503, "", None).outcome == "retry"
    assert classify(404, "channel_not_found", None).outcome == "failed"
    assert classify(400, "invalid_payload", None).detail == "400 invalid_payload"
