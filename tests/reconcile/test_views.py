"""Every view of one rollout tells the same story: the step it is at, how its rollback ended,
and the roles its gates play.

A real reconciler drives a rollout of a production plan without an executor on the memory
twins to its second step, where an operator aborts it; then rolloutctl (status as text and as
JSON, list, history), the Slack messages, the web pages and rolloutd's metrics are read for it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from rolloutd.alerts.slack import render_text
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.operations import submit_command
from rolloutd.store.models import GateEvaluation
from rolloutd.store.outbox import list_messages
from rolloutd.web.pages import index_page, rollout_html, rollout_json
from tests.plans import NO_EXECUTOR, memory_plan, plan_of
from tests.twins import Leader

if TYPE_CHECKING:
    from conftest import StoreHandle

    from tests.cli import Ctl

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
REASON = NO_EXECUTOR["reason"]
TRAFFIC_ONLY = "rolled_back (traffic only: no executor)"
# Canary 5% and 25% (48 h bakes) judged on queue timeouts, a pause, full: four steps. The
# queue-timeout gate is also a rollback trigger, beside the OOM count.
PLAN = memory_plan(
    name="atlas-views",
    environment="production",
    gate="queue_timeouts",
    triggers=("oom", "queue_timeouts"),
    executor=NO_EXECUTOR,
    alerts={"channels": {"ops": {"webhook_env": "SLACK_WEBHOOK_OPS"}}, "default": ["ops"]},
)


class Rollout(Leader):
    """The rollout, driven through the database with passing canary metrics."""

    def __init__(self, store: StoreHandle) -> None:
        super().__init__(store, PLAN, start=T0)
        self.metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
        self.metrics.set("oom_events", "canary", 0)

    def at_second_step(self) -> None:
        """Start, verify 5%, bake 48 h, enter and verify 25%."""
        self.tick()
        self.tick(seconds=5)
        self.tick(hours=48)
        assert self.tick(seconds=5) == "running"

    def abort(self) -> None:
        """An operator aborts; the rollback ends once the router reads 0%."""
        with self.store.sessions.begin() as session:
            submit_command(
                session, self.rollout_id, "abort", actor="alice", reason="bad", now=self.clock()
            )
        assert self.tick(seconds=1) == "rolling_back"
        assert self.tick(seconds=5) == "rolled_back"

    def slack(self) -> list[dict[str, Any]]:
        """The Slack messages queued for the rollout, oldest first, with their topics."""
        with self.store.sessions() as session:
            return [
                {"topic": m.topic, "severity": m.severity, **m.message}
                for m in list_messages(session, self.rollout_id)
            ]

    def web(self) -> tuple[str, str, dict[str, Any]]:
        """The web view's rollout page, its list page and the report's JSON."""
        with self.store.sessions() as session:
            page = rollout_html(session, self.rollout_id, now=self.clock(), report=False)
            listed = index_page(session, {}, now=self.clock())
            report = rollout_json(session, self.rollout_id, now=self.clock())
        return page, listed, report

    def metric_samples(self, name: str) -> list[dict[str, str]]:
        """The labels of rolloutd's ``name`` samples for this rollout that read 1 (or have a
        value at all, for gauges that are no one-hot)."""
        metrics = DaemonMetrics(
            self.store.sessions, instance="a", wall=self.clock, leading=lambda: 1
        )
        body, _ = metrics.exposition()
        return [
            {**s.labels, "value": str(s.value)}
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
            if s.name == name and s.labels.get("rollout") == str(self.rollout_id)
        ]


@pytest.fixture
def aborted(store: StoreHandle) -> Rollout:
    """The rollout, aborted at its second step (canary 25%) and rolled back."""
    rollout = Rollout(store)
    rollout.at_second_step()
    rollout.abort()
    return rollout


def _numbers(pattern: str, text: str) -> set[int]:
    return {int(n) for n in re.findall(pattern, text)}


def test_every_view_names_the_same_step_counted_from_one(aborted: Rollout, bare_ctl: Ctl) -> None:
    """The rollout ended in its second of four steps: status (text and JSON), list (text and
    JSON), the history, the Slack alerts and the web pages all say step 2 (of 4)."""
    rollout_id = str(aborted.rollout_id)
    status = bare_ctl.json("status", rollout_id)
    assert (status["step"], status["steps"]) == (2, 4)
    (row,) = bare_ctl.json("list")
    assert (row["step"], row["steps"]) == (2, 4)
    _, status_text, _ = bare_ctl("status", rollout_id)
    assert _numbers(r"step (\d+) of 4: canary 25%", status_text) == {2}
    _, list_text, _ = bare_ctl("list")
    assert _numbers(r"(\d+) of 4: canary 25%", list_text) == {2}
    _, history, _ = bare_ctl("history", rollout_id)
    assert _numbers(r"step (\d+) of 4 \(canary 25%\) entered", history) == {2}
    assert _numbers(r"step (\d+) of 4 \(canary 5%\) completed", history) == {1}
    (rollback,) = [m for m in aborted.slack() if m["topic"] == "rollback_started"]
    assert _numbers(r"Step\*: (\d+) of 4 canary 25%", render_text(rollback)) == {2}
    assert _numbers(r"step (\d+) of 4 canary 25%", rollback["text"]) == {2}
    page, listed, report = aborted.web()
    assert _numbers(r"step (\d+) of 4: canary 25%", page) == {2}
    assert _numbers(r"<td>(\d+) of 4: canary 25%</td>", page) == {2}
    assert _numbers(r"<td>(\d+) of 4: canary 25%</td>", listed) == {2}
    assert report["status"]["step"] == 2
    assert [s["step"] for s in report["steps"]] == [1, 2]


def test_a_traffic_only_rollback_reads_so_in_every_view(aborted: Rollout, bare_ctl: Ctl) -> None:
    """``rolled_back (traffic only: no executor)`` in status, list, the web pages; JSON keeps
    ``state: rolled_back`` with ``rollback: traffic_only`` and the plan's reason; the history's
    rolled_back event, the Slack alert and the metrics' ``rollback`` label say it too."""
    rollout_id = str(aborted.rollout_id)
    status = bare_ctl.json("status", rollout_id)
    assert (status["state"], status["rollback"], status["no_executor_reason"]) == (
        "rolled_back",
        "traffic_only",
        REASON,
    )
    (row,) = bare_ctl.json("list")
    assert (row["state"], row["rollback"]) == ("rolled_back", "traffic_only")
    _, status_text, _ = bare_ctl("status", rollout_id)
    assert TRAFFIC_ONLY in status_text and f"no executor: {REASON}" in status_text
    _, list_text, _ = bare_ctl("list")
    assert TRAFFIC_ONLY in list_text
    (ended,) = [e for e in bare_ctl.json("history", rollout_id) if e["kind"] == "rolled_back"]
    assert ended["detail"].startswith("rollback finished (traffic only: no executor)")
    (alert,) = [m for m in aborted.slack() if m["topic"] == "rolled_back"]
    assert alert["severity"] == "warning"
    assert "traffic only: no executor" in alert["text"] and REASON in render_text(alert)
    page, listed, report = aborted.web()
    assert f'<span class="state s-rolled_back">{TRAFFIC_ONLY}</span>' in page
    assert f'<span class="state s-rolled_back">{TRAFFIC_ONLY}</span>' in listed
    assert report["status"]["rollback"] == "traffic_only"
    (state,) = [
        s for s in aborted.metric_samples("rolloutd_rollout_state") if s["state"] == "rolled_back"
    ]
    assert (state["rollback"], state["value"]) == ("traffic_only", "1.0")


def test_a_gate_that_is_also_a_trigger_is_stored_and_shown_in_both_roles(
    store: StoreHandle, bare_ctl: Ctl
) -> None:
    """queue_timeouts gates the canary steps and is a rollback trigger: its evaluations there
    are stored as ``step+trigger``, status shows both roles (text and JSON), and so does the
    web page; the OOM trigger stays a trigger."""
    rollout = Rollout(store)
    rollout.at_second_step()
    with store.sessions() as session:
        stored = set(session.execute(select(GateEvaluation.gate, GateEvaluation.role)))
    assert stored == {("queue_timeouts", "step+trigger"), ("oom", "trigger")}
    status = bare_ctl.json("status", str(rollout.rollout_id))
    roles = {g["name"]: (g["role"], g["roles"]) for g in status["gates"]}
    assert roles == {
        "queue_timeouts": ("step+trigger", ["step", "trigger"]),
        "oom": ("trigger", ["trigger"]),
    }
    _, text, _ = bare_ctl("status", str(rollout.rollout_id))
    assert re.search(r"queue_timeouts\s*│\s*step, trigger\s*│", text), text
    page, _, report = rollout.web()
    assert '<h3>queue_timeouts <span class="muted">step, trigger' in page
    assert {g["name"]: g["roles"] for g in report["gates"]} == {
        "queue_timeouts": ["step", "trigger"],
        "oom": ["trigger"],
    }
    samples = rollout.metric_samples("rolloutd_gate_value")
    assert {(s["gate"], s["role"]) for s in samples} == {
        ("queue_timeouts", "step+trigger"),
        ("oom", "trigger"),
    }


@pytest.fixture
def running(store: StoreHandle) -> Rollout:
    """The rollout, running at its second step (canary 25%)."""
    rollout = Rollout(store)
    rollout.at_second_step()
    return rollout


@pytest.mark.parametrize("at", ["running", "aborted"])
def test_a_rollout_stored_without_an_outline_reads_as_one_with(
    request: pytest.FixtureRequest, at: str, bare_ctl: Ctl, plan_rebuilds: list[int]
) -> None:
    """A rollout started before outlines were stored (plan_outline null) shows the same
    status, list row and web page, derived from its plan; with its outline none is built."""
    from rolloutd.store.models import Rollout as RolloutRow

    rollout: Rollout = request.getfixturevalue(at)
    rollout_id = str(rollout.rollout_id)
    with_outline = (bare_ctl.json("status", rollout_id), bare_ctl.json("list"), rollout.web()[2])
    assert plan_rebuilds == []
    with rollout.store.sessions.begin() as session:
        session.get_one(RolloutRow, rollout.rollout_id).plan_outline = None
    without = (bare_ctl.json("status", rollout_id), bare_ctl.json("list"), rollout.web()[2])
    assert without == with_outline
    assert plan_rebuilds == [rollout.rollout_id]  # once per content hash, not once per view


def test_outlines_derived_for_old_rollouts_are_kept_for_the_newest_hashes_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process that shows many rollouts stored without an outline keeps a bounded number of
    derived outlines: the oldest content hash goes first, and is derived again if shown."""
    from types import SimpleNamespace

    from rolloutd import operations, views

    plan = plan_of(memory_plan())
    rebuilt: list[int] = []

    def shown_plan(rollout: Any) -> Any:
        rebuilt.append(rollout.id)
        return plan

    monkeypatch.setattr(operations, "shown_plan", shown_plan)
    monkeypatch.setattr(views, "_derived", {})
    monkeypatch.setattr(views, "DERIVED_KEPT", 2)
    rollouts = [SimpleNamespace(id=i, plan_outline=None, plan_hash=f"h{i}") for i in range(3)]
    for rollout in (*rollouts, rollouts[2], rollouts[0]):
        assert views.outline_of(rollout) == plan.outline()  # type: ignore[arg-type]
    assert rebuilt == [0, 1, 2, 0]
    assert list(views._derived) == ["h2", "h0"]
