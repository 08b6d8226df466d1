"""A leader with one rollout whose plan alerts to Slack, a fake clock, and the alert sender;
and the same pointed at a Slack-like server.

The reconciler, the outbox and the sender are the real ones on the real database; the router
and metrics are in-memory twins; Slack is :class:`tests.outbox.slack.SlackServer`. The clock
moves only when the test says so, so minutes of outage take milliseconds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self

import httpx

from rolloutd.alerts.sender import Sender
from rolloutd.alerts.webhooks import Webhooks
from rolloutd.store import queries
from rolloutd.store.lease import Held
from rolloutd.store.outbox import enqueue_message, list_messages
from tests.outbox.slack import SlackServer
from tests.plans import NO_EXECUTOR, memory_plan
from tests.twins import Leader

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SECRET = "xoxSECRETtoken0123456789abcdef"

PLAN: dict[str, Any] = memory_plan(
    name="atlas-maxseq8192",
    environment="production",
    gate="queue_timeouts",
    triggers=("oom", "queue_timeouts"),
    executor=NO_EXECUTOR,
    alerts={
        "channels": {
            "ops": {"webhook_env": "SLACK_WEBHOOK_OPS"},
            "oncall": {"webhook_env": "SLACK_WEBHOOK_ONCALL", "min_severity": "critical"},
        },
        "default": ["ops", "oncall"],
        "routes": {"awaiting_promotion": {"channels": ["ops"], "severity": "warning"}},
        "prometheus_url": "http://prometheus.example:9090",
    },
)


class Harness(Leader):
    """One rollout driven by a real reconciler, alerts delivered by a real sender."""

    def __init__(
        self,
        store: StoreHandle,
        environ: Mapping[str, str],
        *,
        plan: dict[str, Any] | None = None,
        timeout: float = 2.0,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(store, plan or PLAN, start=T0)
        self.healthy()
        self.environ = dict(environ)
        self.sender = self.new_sender(timeout=timeout, client=client)

    def new_sender(
        self,
        *,
        timeout: float = 2.0,
        client: httpx.Client | None = None,
        webhooks: Webhooks | None = None,
        lease: Callable[[], Held | None] | None = None,
    ) -> Sender:
        """A sender as a freshly started daemon has it (nothing in memory), fenced by the
        harness's lease unless given another."""
        return Sender(
            self.store.sessions,
            webhooks=webhooks or Webhooks("/nonexistent", environ=lambda: self.environ),
            clock=self.clock,
            timeout=timeout,
            client=client,
            lease=lease or (lambda: self.held),
        )

    def healthy(self) -> None:
        """Canary metrics that pass every gate."""
        self.metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
        self.metrics.set("oom_events", "canary", 0)

    def send(self, runs: int = 1, every: float = 0.5) -> int:
        """Run the sender ``runs`` times, ``every`` seconds apart; how many were sent."""
        sent = 0
        for i in range(runs):
            if i:
                self.clock.advance(seconds=every)
            sent += self.sender.run_once()
        return sent

    def outbox(self) -> list[dict[str, Any]]:
        """Every outbox row, oldest first, as plain dicts."""
        with self.store.sessions() as session:
            return [
                {
                    "key": m.key,
                    "topic": m.topic,
                    "channel": m.channel,
                    "severity": m.severity,
                    "status": m.status,
                    "attempts": m.attempts,
                    "last_error": m.last_error,
                    "message": copy.deepcopy(m.message),
                }
                for m in list_messages(session)
            ]

    def events(self, rollout_id: int | str | None = "mine") -> list[dict[str, Any]]:
        """Events of this rollout (or of another, or daemon-level for None)."""
        which = self.rollout_id if rollout_id == "mine" else rollout_id
        with self.store.sessions() as session:
            return [
                {"kind": e.kind, "detail": e.detail, "data": dict(e.data)}
                for e in queries.list_events(session, which)  # type: ignore[arg-type]
            ]


def queued_for(store: StoreHandle, rollout_id: int, key: str) -> list[dict[str, Any]]:
    """The outbox rows of the alert action ``key`` of ``rollout_id``, as the action's payload
    holds its messages."""
    prefix = f"rollout-{rollout_id}/{key}/"
    with store.sessions() as session:
        return [
            {
                "channel": m.channel,
                "webhook_env": m.webhook_env,
                "severity": m.severity,
                "message": m.message,
            }
            for m in list_messages(session, rollout_id)
            if m.key == prefix + m.channel
        ]


class SlackRig:
    """A harness ``h`` whose two channels, ops and oncall, point at one Slack-like server
    that keeps the harness's time."""

    def __init__(self, store: StoreHandle, slack: SlackServer) -> None:
        self.slack = slack
        self.ops_url = slack.webhook(f"ops-{SECRET}")
        self.oncall_url = slack.webhook(f"oncall-{SECRET}")
        env = {"SLACK_WEBHOOK_OPS": self.ops_url, "SLACK_WEBHOOK_ONCALL": self.oncall_url}
        self.h = Harness(store, env, timeout=0.3)
        slack.clock = self.h.clock

    @classmethod
    @contextmanager
    def running(cls, store: StoreHandle) -> Iterator[Self]:
        """A rig on a Slack-like server that runs until the block ends."""
        with SlackServer(clock=lambda: None) as slack:  # type: ignore[arg-type, return-value]
            yield cls(store, slack)

    def enqueue(self, tag: str, webhook_env: str, channel: str) -> None:
        """Put a critical ``rollback_started`` message saying ``tag`` (keyed by it too) for
        ``webhook_env`` in the outbox, as the reconciler does."""
        with self.h.store.sessions.begin() as session:
            enqueue_message(
                session,
                key=f"test/{tag}",
                rollout_id=self.h.rollout_id,
                topic="rollback_started",
                severity="critical",
                channel=channel,
                webhook_env=webhook_env,
                message={"text": tag, "blocks": []},
                now=self.h.clock(),
            )
