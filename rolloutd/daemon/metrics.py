"""rolloutd's own metrics, for Prometheus: what each rollout is doing, and is the daemon well.

Served as ``/metrics`` beside ``/healthz``. Two kinds:

* read from the database at scrape time (every instance, standbys included, reports the same
  values, so a dashboard or an alert keeps working whichever instance leads): per rollout its
  state, step and canary weight, each gate's newest value and verdict, failed action attempts,
  its rollback and holds by cause and its extended bakes, and the alert outbox's depth and
  oldest age;
* counted in this process: ticks and their duration, alert delivery outcomes, and whether
  this instance leads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, get_args

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from rolloutd.core.actions import Verdict
from rolloutd.core.machine import rollback_kind
from rolloutd.core.progress import Progress, RollbackKind, State, rollback_outcome
from rolloutd.errors import RolloutdError
from rolloutd.reconcile import NotLeading
from rolloutd.store import exposition, queries
from rolloutd.store.db import transaction
from rolloutd.store.errors import StoreError
from rolloutd.store.models import Rollout
from rolloutd.store.outbox import outbox_stats
from rolloutd.views import outline_of

if TYPE_CHECKING:
    from rolloutd.store.types import Session, Sessions

log = structlog.get_logger("rolloutd.metrics")

# Ended rollouts stay on the dashboard this long, so "rolled back" is seen, not just vanishes.
ENDED_VISIBLE_FOR = timedelta(hours=1)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ROLLBACK_CAUSES: tuple[RollbackKind, ...] = get_args(RollbackKind)
HOLD_CAUSES = ("operator", "no_data")


class DaemonMetrics:
    """The registry behind ``/metrics`` and the counters the daemon updates."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        instance: str,
        wall: Callable[[], datetime],
        leading: Callable[[], int | None],
        round_trips: Callable[[], int] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ticks = Counter(
            "rolloutd_ticks",
            "Rollout ticks run by this instance, by outcome (ok, not_leading, error).",
            ["outcome"],
            registry=self.registry,
        )
        self.tick_seconds = Histogram(
            "rolloutd_tick_duration_seconds",
            "Wall time of one batch of rollout ticks (one transaction) on this instance.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.tick_lag = Histogram(
            "rolloutd_tick_lag_seconds",
            "From a tick's due time to its start: how far the leader runs behind.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.ticks_missed = Counter(
            "rolloutd_ticks_missed",
            "Due ticks not run because the rollout's previous tick still ran or the leader "
            "was too late to run them at all.",
            registry=self.registry,
        )
        self.deliveries = Counter(
            "rolloutd_alert_deliveries",
            "Attempts to post an alert to Slack, by outcome "
            "(sent, rate_limited, retry, failed, unconfigured).",
            ["outcome"],
            registry=self.registry,
        )
        self.registry.register(_LeaderCollector(instance, leading))
        if round_trips is not None:
            self.registry.register(_RoundTripCollector(round_trips))
        self.registry.register(_StoreCollector(sessions, wall))

    @contextmanager
    def ticking(self, rollouts: int = 1) -> Iterator[None]:
        """Time one batch and count the ticks of its ``rollouts``; an exception is counted by
        its kind and passed on."""
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        except NotLeading:
            outcome = "not_leading"
            raise
        finally:
            self.tick_seconds.observe(time.perf_counter() - started)
            self.ticks.labels(outcome).inc(rollouts)

    def delivered(self, outcome: str) -> None:
        """Count one delivery attempt of the alert sender."""
        self.deliveries.labels(outcome).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text format Prometheus scrapes, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _LeaderCollector(Collector):
    def __init__(self, instance: str, leading: Callable[[], int | None]) -> None:
        self.instance = instance
        self.leading = leading

    def collect(self) -> Iterable[Metric]:
        epoch = self.leading()
        leader = GaugeMetricFamily(
            "rolloutd_leader",
            "1 while this instance holds the leader lease, else 0 (daemon: its instance name;"
            " not 'instance', which Prometheus sets to the scrape target).",
            labels=["daemon"],
        )
        leader.add_metric([self.instance], 1.0 if epoch is not None else 0.0)
        yield leader
        if epoch is not None:
            yield GaugeMetricFamily(
                "rolloutd_leader_epoch",
                "The fencing epoch of the lease this instance holds.",
                epoch,
            )


class _RoundTripCollector(Collector):
    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "rolloutd_store_round_trips",
            "Times this instance waited on the database: statements, BEGINs, COMMITs, "
            "ROLLBACKs and pre-pings.",
            value=self.count(),
        )


class _StoreCollector(Collector):
    """Reads the database on each scrape; a failed read reports ``rolloutd_store_up 0``."""

    def __init__(self, sessions: Sessions, wall: Callable[[], datetime]) -> None:
        self.sessions = sessions
        self.wall = wall

    def describe(self) -> Iterable[Metric]:
        return []  # the families are built per scrape; nothing to check at registration

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "rolloutd_store_up", "1 when this scrape could read rolloutd's database."
        )
        try:
            with transaction(self.sessions) as session:
                families = list(self._families(session, self.wall()))
        except (RolloutdError, StoreError) as exc:
            log.warning("metrics: cannot read the database", error=str(exc).splitlines()[0])
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families

    def _families(self, session: Session, now: datetime) -> Iterator[Metric]:
        rollout_labels = ["rollout", "name", "service", "environment"]
        gate_labels = ["rollout", "gate", "role"]
        state = GaugeMetricFamily(
            "rolloutd_rollout_state",
            "1 for the rollout's current state, 0 for the others; rollback: how its rollback "
            "ended (verified, or traffic_only: the plan has no executor), empty before.",
            labels=[*rollout_labels, "state", "rollback"],
        )
        step = GaugeMetricFamily(
            "rolloutd_rollout_step", "The rollout's current step (0-based).", labels=rollout_labels
        )
        weight = GaugeMetricFamily(
            "rolloutd_rollout_canary_weight_percent",
            "The share of sessions the rollout intends for the canary.",
            labels=rollout_labels,
        )
        gate_value = GaugeMetricFamily(
            "rolloutd_gate_value",
            "The newest value of each gate of each rollout (absent while it has none).",
            labels=gate_labels,
        )
        gate_verdict = GaugeMetricFamily(
            "rolloutd_gate_verdict",
            "1 for the gate's newest verdict, 0 for the others.",
            labels=[*gate_labels, "verdict"],
        )
        gate_age = GaugeMetricFamily(
            "rolloutd_gate_evaluated_timestamp_seconds",
            "When the gate was last evaluated (Unix time).",
            labels=gate_labels,
        )
        failures = CounterMetricFamily(
            "rolloutd_action_failures",
            "Failed attempts at the rollout's actions (set weights, alerts), by kind.",
            labels=["rollout", "kind"],
        )
        rollouts = _visible(session, now)
        # The outline stored with each rollout, not its plan: a scrape of 10,000 rollouts
        # must not build 10,000 plan models.
        outlines = {rollout.id: outline_of(rollout) for rollout in rollouts}
        newest = queries.latest_of_rollouts(
            session, {rollout_id: outline.gates for rollout_id, outline in outlines.items()}
        )
        for rollout in rollouts:
            outline = outlines[rollout.id]
            progress = Progress.from_storage(rollout.progress)
            labels = [str(rollout.id), rollout.name, rollout.service, rollout.environment]
            current = outline.state(progress)
            ended = rollback_outcome(progress) or ""
            for candidate in State:
                state.add_metric([*labels, candidate.value, ended], float(candidate is current))
            step.add_metric(labels, float(outline.step(progress)[0]))
            weight.add_metric(labels, float(outline.weight(progress)))
            for gate, row in sorted(newest[rollout.id].items()):
                gate_labels = [str(rollout.id), gate, row.role]
                if row.value is not None:
                    gate_value.add_metric(gate_labels, row.value)
                gate_age.add_metric(gate_labels, row.evaluated_at.timestamp())
                for verdict in Verdict:
                    gate_verdict.add_metric(
                        [*gate_labels, verdict.value], float(row.verdict == verdict.value)
                    )
        for rollout_id, kind, attempts in exposition.attempts_by_kind(
            session, [r.id for r in rollouts]
        ):
            failures.add_metric([str(rollout_id), kind], float(attempts))
        yield from (state, step, weight, gate_value, gate_verdict, gate_age, failures)
        yield from _causes(session, rollouts)
        yield from _outbox(session, now)


def _causes(session: Session, rollouts: list[Rollout]) -> Iterator[Metric]:
    """Rollbacks by cause (from the rollback facts), holds by cause and extended bakes (from
    the events). Every cause is reported, at 0 until it happens, so ``increase()`` sees the
    first one."""
    labels = ["rollout", "service", "environment"]
    rollbacks = CounterMetricFamily(
        "rolloutd_rollbacks",
        "Rollbacks started, by cause: gate (a step gate's breach), trigger, abort, deadline "
        "(progress deadline) or no_data (a gate's on_no_data).",
        labels=[*labels, "cause"],
    )
    holds = CounterMetricFamily(
        "rolloutd_holds",
        "Times the rollout was paused, by cause: operator, or no_data (inconclusive evaluations "
        "past the limit, or samples short after the extension).",
        labels=[*labels, "cause"],
    )
    extensions = CounterMetricFamily(
        "rolloutd_step_extensions",
        "Bakes extended because a gate had fewer samples than the step's min_samples.",
        labels=labels,
    )
    counted: dict[int, dict[str, int]] = {r.id: {} for r in rollouts}
    rows = exposition.events_of_kinds(session, list(counted), ("paused", "step_extended"))
    for rollout_id, kind, detail, data in rows:
        key = kind if kind == "step_extended" else _hold_cause(detail, data)
        counts = counted[rollout_id]
        counts[key] = counts.get(key, 0) + 1
    for rollout in rollouts:
        rollout_labels = [str(rollout.id), rollout.service, rollout.environment]
        facts = Progress.from_storage(rollout.progress).rollback
        started = None if facts is None else rollback_kind(outline_of(rollout).triggers, facts)
        for cause in ROLLBACK_CAUSES:
            rollbacks.add_metric([*rollout_labels, cause], float(cause == started))
        counts = counted[rollout.id]
        for held in HOLD_CAUSES:
            holds.add_metric([*rollout_labels, held], float(counts.get(held, 0)))
        extensions.add_metric(rollout_labels, float(counts.get("step_extended", 0)))
    yield from (rollbacks, holds, extensions)


def _hold_cause(detail: str, data: dict[str, Any] | None) -> str:
    """Why a rollout was paused; events written before the cause was stored say it in words
    (an operator's pause reads ``paused by NAME``, the machine's ``paused: WHY``)."""
    cause = (data or {}).get("cause")
    if isinstance(cause, str):
        return cause
    return "no_data" if detail.startswith("paused: ") else "operator"


def _visible(session: Session, now: datetime) -> list[Rollout]:
    return exposition.visible_rollouts(session, now - ENDED_VISIBLE_FOR)


def _outbox(session: Session, now: datetime) -> Iterator[Metric]:
    stats = outbox_stats(session)
    yield GaugeMetricFamily(
        "rolloutd_outbox_pending", "Alert messages waiting to be delivered.", stats.pending
    )
    age = 0.0
    if stats.oldest_pending_at is not None:
        age = max((now - stats.oldest_pending_at).total_seconds(), 0.0)
    yield GaugeMetricFamily(
        "rolloutd_outbox_oldest_pending_age_seconds",
        "Age of the oldest undelivered alert message (0 when none waits).",
        age,
    )
    yield CounterMetricFamily(
        "rolloutd_outbox_failed",
        "Alert messages given up (Slack refused them for good).",
        stats.failed,
    )
    yield CounterMetricFamily("rolloutd_outbox_sent", "Alert messages Slack accepted.", stats.sent)
