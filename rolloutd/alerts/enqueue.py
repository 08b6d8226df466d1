"""Turning an alert into outbox messages, inside the caller's transaction.

The plan's ``alerts`` section says which channels hear about a topic and from which severity
on. A rollout's alert is built into its routed messages (:func:`rollout_messages`) from
plain inputs, when it is decided, so what the operator reads is what was true then. Each
(alert, channel) pair becomes one outbox row under a deterministic key, so the transaction
that records the cause can run again after a crash and add nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from rolloutd.alerts.slack import AlertFacts, build_message, graph_url
from rolloutd.core.actions import CommandKind
from rolloutd.core.machine import refusal
from rolloutd.core.plan import AlertChannel, Alerts, Plan
from rolloutd.core.progress import Progress
from rolloutd.operations import plan_of
from rolloutd.store import queries
from rolloutd.store.models import GateEvaluation, Rollout
from rolloutd.store.outbox import enqueue_message

if TYPE_CHECKING:
    from rolloutd.store.types import Session

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
_SUGGESTED: tuple[tuple[CommandKind, str], ...] = (
    ("promote", 'rolloutctl promote {id} --reason "..."'),
    ("abort", 'rolloutctl abort {id} --reason "..."'),
    ("resume", "rolloutctl resume {id}"),
)


class Named(Protocol):
    """Who a rollout is, as its messages name it."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def service(self) -> str: ...

    @property
    def environment(self) -> str: ...


Newest = Callable[[str], GateEvaluation | None]
"""The newest evaluation of a gate of the rollout, by gate name (its query is the evidence)."""


class Routed(TypedDict):
    """One alert's message to one channel, at the severity routed to it."""

    channel: str
    webhook_env: str
    severity: str
    message: dict[str, Any]


def deliveries(alerts: Alerts, topic: str, severity: str) -> list[tuple[str, AlertChannel, str]]:
    """The channels that hear about ``topic``: (name, channel, severity as routed)."""
    route = alerts.routes.get(topic)  # type: ignore[call-overload]
    names = route.channels if route is not None else alerts.default
    routed = route.severity if route is not None and route.severity else severity
    return [
        (name, alerts.channels[name], routed)
        for name in names
        if SEVERITY_RANK[routed] >= SEVERITY_RANK[alerts.channels[name].min_severity]
    ]


def evidence_base(plan: Plan) -> str | None:
    """Where graph links point: the plan's ``alerts.prometheus_url``, else its Prometheus.

    None unless the gates read Prometheus: other sources' queries are not PromQL.
    """
    if plan.metrics.source != "prometheus":
        return None
    if plan.alerts is not None and plan.alerts.prometheus_url:
        return plan.alerts.prometheus_url
    return plan.metrics.url


def rollout_messages(
    plan: Plan,
    progress: Progress,
    rollout: Named,
    *,
    topic: str,
    severity: str,
    text: str,
    data: Mapping[str, Any],
    newest: Newest,
) -> list[Routed]:
    """The messages of an alert of ``rollout``: one for each channel ``plan`` routes
    ``topic`` to, saying where ``progress`` stands and which commands apply to it.

    ``newest`` is asked only for the alert's gate, and only when the plan's gates read
    Prometheus (the evidence link opens its query).
    """
    if plan.alerts is None:
        return []
    routed = deliveries(plan.alerts, topic, severity)
    if not routed:
        return []
    facts = _facts(plan, progress, rollout, topic, severity, text, data, newest)
    return [_routed(facts, name, channel, sev) for name, channel, sev in routed]


def newest_in(session: Session, rollout_id: int) -> Newest:
    """The newest evaluation of a gate of ``rollout_id``, read in ``session`` when asked."""
    return lambda gate: queries.latest_evaluations(session, rollout_id, gates=[gate]).get(gate)


def enqueue_routed(
    session: Session,
    messages: Iterable[Routed],
    *,
    rollout_id: int,
    key: str,
    topic: str,
    now: datetime,
) -> int:
    """Queue an alert's messages under ``rollout-<id>/<key>/<channel>``.

    :returns: how many were added (0 on a replay).
    """
    return sum(
        _enqueue(session, f"rollout-{rollout_id}/{key}/{m['channel']}", rollout_id, topic, m, now)
        for m in messages
    )


def enqueue_rollout_alert(
    session: Session,
    rollout: Rollout,
    *,
    key: str,
    topic: str,
    severity: str,
    text: str,
    data: Mapping[str, Any],
    now: datetime,
) -> int:
    """Queue one message per routed channel for an alert of ``rollout``, as its stored plan
    and progress say now.

    :returns: how many messages were added (0 without an ``alerts`` section, or on a replay).
    """
    messages = rollout_messages(
        plan_of(rollout),
        Progress.from_storage(rollout.progress),
        rollout,
        topic=topic,
        severity=severity,
        text=text,
        data=data,
        newest=newest_in(session, rollout.id),
    )
    return enqueue_routed(session, messages, rollout_id=rollout.id, key=key, topic=topic, now=now)


def enqueue_leadership_alert(
    session: Session, *, change: str, instance: str, epoch: int, now: datetime
) -> int:
    """Tell the channels of every active rollout that leadership changed.

    Channels are deduplicated by webhook, so a channel shared by several plans hears it once.

    :returns: how many messages were added.
    """
    rollouts = queries.list_rollouts(session, active_only=True, limit=10_000)
    if not rollouts:
        return 0
    ids = ", ".join(str(r.id) for r in rollouts)
    if change == "acquired":
        severity = "warning"
        text = f"rolloutd@{instance} now leads (epoch {epoch}) and drives rollouts {ids}"
    else:
        severity = "info"
        text = f"rolloutd@{instance} gave up leadership (epoch {epoch}); a standby takes over"
    facts = AlertFacts(topic="leadership", severity=severity, text=text)
    added = 0
    seen: set[str] = set()
    for rollout in _unique_plans(rollouts):
        plan = plan_of(rollout)
        if plan.alerts is None:
            continue
        for name, channel, routed_severity in deliveries(plan.alerts, "leadership", severity):
            if channel.webhook_env in seen:
                continue
            seen.add(channel.webhook_env)
            key = f"leadership/epoch-{epoch}/{change}/{channel.webhook_env}"
            routed = _routed(facts, name, channel, routed_severity)
            added += _enqueue(session, key, None, facts.topic, routed, now)
    return added


def _unique_plans(rollouts: list[Any]) -> list[Any]:
    """One rollout of each plan that may route alerts: a plan whose text does not say
    ``alerts`` has no alerts section, and is not parsed (a leader of 10,000 rollouts would
    otherwise parse 10,000 plans on taking over)."""
    unique: dict[str, Any] = {}
    for rollout in rollouts:
        if "alerts" in rollout.plan_source:
            unique.setdefault(rollout.plan_hash, rollout)
    return list(unique.values())


def enqueue_plan_alert(
    session: Session,
    plan: Plan,
    *,
    key: str,
    topic: str,
    severity: str,
    text: str,
    now: datetime,
) -> int:
    """Queue an alert that belongs to a plan but to no rollout (a drill's result) on the
    channels the plan routes ``topic`` to; the leader's sender delivers it.

    :returns: how many messages were added (0 without an ``alerts`` section).
    """
    if plan.alerts is None:
        return 0
    facts = AlertFacts(topic=topic, severity=severity, text=text)
    routed = [_routed(facts, *to) for to in deliveries(plan.alerts, topic, severity)]
    return sum(
        _enqueue(session, f"plan-{plan.name}/{key}/{r['channel']}", None, topic, r, now)
        for r in routed
    )


def _routed(facts: AlertFacts, name: str, channel: AlertChannel, severity: str) -> Routed:
    """One message of an alert to one channel, at the severity routed to it."""
    return Routed(
        channel=name,
        webhook_env=channel.webhook_env,
        severity=severity,
        message=build_message(_with_severity(facts, severity)),
    )


def _enqueue(
    session: Session,
    key: str,
    rollout_id: int | None,
    topic: str,
    routed: Routed,
    now: datetime,
) -> int:
    return enqueue_message(
        session,
        key=key,
        rollout_id=rollout_id,
        topic=topic,
        severity=routed["severity"],
        channel=routed["channel"],
        webhook_env=routed["webhook_env"],
        message=routed["message"],
        now=now,
    )


def _facts(
    plan: Plan,
    progress: Progress,
    rollout: Named,
    topic: str,
    severity: str,
    text: str,
    data: Mapping[str, Any],
    newest: Newest,
) -> AlertFacts:
    step = data.get("step")
    index = step if isinstance(step, int) else progress.step_index
    index = min(max(index, 0), len(plan.steps) - 1)
    gate = data.get("gate") if isinstance(data.get("gate"), str) else None
    value = data.get("value")
    threshold = data.get("threshold")
    evidence = None
    base = evidence_base(plan)
    if gate is not None and base is not None:
        latest = newest(gate)
        if latest is not None and latest.query:
            evidence = graph_url(base, latest.query)
            if value is None:
                value = latest.value
            if threshold is None:
                threshold = latest.threshold
    commands = [f"rolloutctl status {rollout.id} --watch"]
    commands += [
        line.format(id=rollout.id)
        for kind, line in _SUGGESTED
        if refusal(plan, progress, kind) is None
    ]
    commands.append(f"rolloutctl history {rollout.id}")
    return AlertFacts(
        topic=topic,
        severity=severity,
        text=text,
        rollout_id=rollout.id,
        rollout_name=rollout.name,
        service=rollout.service,
        environment=rollout.environment,
        step=index,
        steps=len(plan.steps),
        step_name=plan.steps[index].title(),
        weight=plan.step_weight(index),
        gate=gate,
        value=float(value) if isinstance(value, int | float) else None,
        threshold=str(threshold) if threshold is not None else None,
        evidence_url=evidence,
        commands=tuple(commands),
    )


def _with_severity(facts: AlertFacts, severity: str) -> AlertFacts:
    return facts if facts.severity == severity else replace(facts, severity=severity)
