"""Alerts become outbox rows in the transaction that completes them: routed, keyed, complete."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import yaml

from rolloutd.alerts.enqueue import (
    enqueue_leadership_alert,
    enqueue_rollout_alert,
    rollout_messages,
)
from rolloutd.alerts.slack import render_text
from rolloutd.core.progress import Progress
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.store import queries
from rolloutd.store.models import GateEvaluation
from rolloutd.store.outbox import list_messages
from tests.outbox.harness import PLAN, T0, Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


def _breach(h: Harness) -> None:
    h.tick()
    h.metrics.set("queue_timeout_rate", "canary", 0.062, samples=900)
    assert h.tick(seconds=5) == "rolling_back"


def test_a_rollback_alert_names_rollout_step_gate_value_and_threshold(store: StoreHandle) -> None:
    """The message says which rollout, step and gate, and the value against the threshold."""
    h = Harness(store, {})
    _breach(h)
    rows = [r for r in h.outbox() if r["topic"] == "rollback_started"]
    assert {r["channel"] for r in rows} == {"ops", "oncall"}
    message = rows[0]["message"]
    text = render_text(message)
    assert f"(rollout {h.rollout_id})" in text
    assert "atlas-70b/production" in text
    assert "Step*: 1 of 4 canary 5%" in text
    assert "`queue_timeouts`" in text
    assert "0.062 vs <= 0.01" in text
    assert message["text"].startswith("[critical] atlas-70b/production: rollback started")
    assert "gate queue_timeouts = 0.062 (threshold <= 0.01)" in message["text"]
    # While it rolls back, only watching applies: no promote or abort is suggested.
    assert f"rolloutctl status {h.rollout_id} --watch" in text
    assert "rolloutctl promote" not in text and "rolloutctl abort" not in text


def test_awaiting_promotion_suggests_the_exact_promote_and_abort_commands(
    store: StoreHandle,
) -> None:
    """At a pause step the message carries the rolloutctl lines that apply, rerouted to ops."""
    plan = copy.deepcopy(PLAN)
    plan["steps"] = [
        {"kind": "canary", "weight": 5, "bake": "1h"},
        {"kind": "pause"},
        {"kind": "full"},
    ]
    plan["gates"] = {"oom": PLAN["gates"]["oom"]}
    plan["rollback"] = {"triggers": ["oom"]}
    h = Harness(store, {}, plan=plan)
    h.tick()
    h.tick(seconds=5)
    h.tick(hours=1, seconds=1)
    assert h.tick(seconds=5) == "awaiting_promotion"
    rows = [r for r in h.outbox() if r["topic"] == "awaiting_promotion"]
    assert [(r["channel"], r["severity"]) for r in rows] == [("ops", "warning")]
    text = render_text(rows[0]["message"])
    assert f'rolloutctl promote {h.rollout_id} --reason "..."' in text
    assert f'rolloutctl abort {h.rollout_id} --reason "..."' in text


def test_a_replayed_alert_adds_no_second_message(store: StoreHandle) -> None:
    """Queuing the same alert again (a crash before the action was marked done) is a no-op."""
    h = Harness(store, {})
    _breach(h)
    before = h.outbox()
    with store.sessions.begin() as session:
        rollout = queries.get_rollout(session, h.rollout_id)
        keys = queries.done_action_keys(session, h.rollout_id)
        action = next(k for k in keys if k.startswith("alert/rollback_started/"))
        added = enqueue_rollout_alert(
            session,
            rollout,
            key=action,
            topic="rollback_started",
            severity="critical",
            text="again",
            data={},
            now=T0,
        )
    assert added == 0
    assert h.outbox() == before


def test_the_evidence_link_is_a_prometheus_graph_of_the_gates_query(store: StoreHandle) -> None:
    """With a Prometheus source, the link opens the gate's own PromQL on alerts.prometheus_url."""
    plan = copy.deepcopy(PLAN)
    plan["metrics"] = {"source": "prometheus", "url": "http://prom:9090", "templates": "vllm"}
    query = 'sum(rate(vllm:request_success_total{pool="canary",finished_reason="abort"}[5m]))'
    with store.sessions.begin() as session:
        rollout_id = start_rollout(
            session, parse_plan(yaml.safe_dump(plan), "p.yaml"), actor="alice", now=T0
        )
        _evaluation(session, rollout_id, query)
        added = enqueue_rollout_alert(
            session,
            queries.get_rollout(session, rollout_id),
            key="alert/rollback_started/x",
            topic="rollback_started",
            severity="critical",
            text="Rolling back",
            data={"gate": "queue_timeouts", "value": 0.07, "threshold": "<= 0.01"},
            now=T0,
        )
        messages = [m.message for m in list_messages(session, rollout_id)]
    assert added == 2
    link = next(b for b in messages[0]["blocks"] if "Evidence" in str(b))["text"]["text"]
    url = link.strip("<>").split("|")[0]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "http://prometheus.example:9090/graph"
    assert parse_qs(parts.query)["g0.expr"] == [query]


@dataclass(frozen=True)
class Who:
    """Who a rollout is, and nothing else of it."""

    id: int
    name: str
    service: str
    environment: str


def test_an_alerts_messages_are_built_from_plain_inputs_without_a_database() -> None:
    """The plan, the progress, who the rollout is and the gate's newest evaluation make the
    messages: one per routed channel at its severity, the evidence linking the gate's query
    and its value standing in for the one the alert did not say."""
    plan = copy.deepcopy(PLAN)
    plan["metrics"] = {"source": "prometheus", "url": "http://prom:9090", "templates": "vllm"}
    asked: list[str] = []

    def newest(gate: str) -> GateEvaluation:
        asked.append(gate)
        return GateEvaluation(gate=gate, query="sum(up)", value=0.07, threshold="<= 0.01")

    messages = rollout_messages(
        parse_plan(yaml.safe_dump(plan), "p.yaml").plan,
        Progress(step_index=1),
        Who(7, "atlas-maxseq8192", "atlas-70b", "production"),
        topic="rollback_started",
        severity="critical",
        text="Rolling back",
        data={"gate": "queue_timeouts"},
        newest=newest,
    )
    assert asked == ["queue_timeouts"]
    assert [(m["channel"], m["webhook_env"], m["severity"]) for m in messages] == [
        ("ops", "SLACK_WEBHOOK_OPS", "critical"),
        ("oncall", "SLACK_WEBHOOK_ONCALL", "critical"),
    ]
    text = render_text(messages[0]["message"])
    assert "atlas-70b/production: rollback started (rollout 7)" in text
    assert "0.07 vs <= 0.01" in text
    link = next(b for b in messages[0]["message"]["blocks"] if "Evidence" in str(b))
    url = link["text"]["text"].strip("<>").split("|")[0]
    assert parse_qs(urlsplit(url).query)["g0.expr"] == ["sum(up)"]


def _evaluation(session: Any, rollout_id: int, query: str) -> None:
    queries.record_evaluation(
        session,
        rollout_id=rollout_id,
        step_index=0,
        gate="queue_timeouts",
        role="trigger",
        verdict="breach",
        value=0.07,
        threshold="<= 0.01",
        query=query,
        samples=900,
        statistic=None,
        reason=None,
        evidence={},
        evaluated_at=T0,
    )


def test_a_plan_without_alerts_queues_nothing(store: StoreHandle) -> None:
    """No alerts section: the rollback still happens and the outbox stays empty."""
    plan = copy.deepcopy(PLAN)
    del plan["alerts"]
    h = Harness(store, {}, plan=plan)
    _breach(h)
    assert h.outbox() == []


def test_leadership_alerts_go_once_per_webhook_of_active_rollouts(store: StoreHandle) -> None:
    """A new leader is announced to each webhook of the active rollouts' plans, once."""
    h = Harness(store, {})
    other = copy.deepcopy(PLAN)
    other["service"] = "atlas-8b"
    with store.sessions.begin() as session:
        start_rollout(session, parse_plan(yaml.safe_dump(other), "o.yaml"), actor="bob", now=T0)
        added = enqueue_leadership_alert(
            session, change="acquired", instance="ops-2", epoch=7, now=T0
        )
        again = enqueue_leadership_alert(
            session, change="acquired", instance="ops-2", epoch=7, now=T0
        )
    rows = h.outbox()
    assert added == 1 and again == 0  # warning: ops only (oncall wants critical)
    assert [(r["topic"], r["channel"]) for r in rows] == [("leadership", "ops")]
    assert "rolloutd@ops-2 now leads (epoch 7)" in rows[0]["message"]["text"]
