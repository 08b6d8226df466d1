"""A leader with one rollout whose plan alerts to Slack, a fake clock, and the alert sender.

The reconciler, the outbox and the sender are the real ones on the real database; the router
and metrics are in-memory twins; Slack is :class:`tests.outbox.slack.SlackServer`. The clock
moves only when the test says so, so minutes of outage take milliseconds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from rolloutd.alerts.sender import Sender
from rolloutd.alerts.webhooks import Webhooks
from rolloutd.analysis.sources import MemoryMetrics
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.reconcile import Reconciler
from rolloutd.routers.base import MemoryRouter
from rolloutd.store import lease, queries
from rolloutd.store.lease import Held
from rolloutd.store.outbox import list_messages
from tests.plans import memory_plan
from tests.twins import Clock, Twins

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SECRET = "xoxSECRETtoken0123456789abcdef"

PLAN: dict[str, Any] = memory_plan(
    name="atlas-maxseq8192",
    environment="production",
    gate="queue_timeouts",
    triggers=("oom", "queue_timeouts"),
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


class Harness:
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
        self.store = store
        self.clock = Clock(T0)
        self.router = MemoryRouter()
        self.metrics = MemoryMetrics()
        self.healthy()
        with store.sessions.begin() as session:
            self.held = lease.acquire(
                session, holder="me", ttl=timedelta(hours=10_000), now=self.clock()
            )
        self.reconciler = Reconciler(
            store.sessions,
            Twins(self.router, self.metrics),
            clock=self.clock,
            lease=lambda: self.held,
            instance="test",
        )
        self.environ = dict(environ)
        self.sender = self.new_sender(timeout=timeout, client=client)
        with store.sessions.begin() as session:
            loaded = parse_plan(yaml.safe_dump(plan or PLAN), "plan.yaml")
            self.rollout_id = start_rollout(session, loaded, actor="alice", now=self.clock())

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

    def tick(self, **advance: float) -> str:
        """Move the clock, then run one tick; returns the state."""
        if advance:
            self.clock.advance(**advance)
        return self.reconciler.tick(self.rollout_id).state.value

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
