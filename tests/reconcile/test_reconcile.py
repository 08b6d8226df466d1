"""The reconciler against a real database, with an in-memory router and metrics twin.

Time is a fake clock, so 48 h bakes take microseconds; the lease is a real row.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlalchemy.orm import Session

from rolloutd.core.actions import CommandKind
from rolloutd.core.progress import Progress
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.operations import submit_command
from rolloutd.reconcile import STUCK_AFTER_ATTEMPTS, NotLeading
from rolloutd.routers.base import MemoryRouter, Router, RouterState
from rolloutd.store import lease, queries
from rolloutd.store.models import Action
from rolloutd.store.models import Command as CommandRow
from tests.plans import memory_plan
from tests.twins import Leader

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

PLAN = memory_plan(limits={"max_inconclusive": 2})


class Harness(Leader):
    """A leader (lease held in the database), a reconciler and one rollout with passing
    canary metrics."""

    def __init__(
        self, store: StoreHandle, router: Router | None = None, plan: dict[str, Any] | None = None
    ) -> None:
        super().__init__(store, plan or PLAN, start=T0, router=router)
        self.metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
        self.metrics.set("oom_events", "canary", 0)

    def command(self, kind: CommandKind, reason: str | None = None) -> None:
        with self.store.sessions.begin() as session:
            submit_command(
                session, self.rollout_id, kind, actor="alice", reason=reason, now=self.clock()
            )

    def complete(self) -> None:
        """Tick the rollout through its steps, promoted where it waits, until it completed."""
        self.tick()
        self.tick(seconds=5)
        self.tick(hours=48)
        self.tick(seconds=5)
        self.tick(hours=48, seconds=1)
        self.command("promote")
        self.tick(seconds=5)
        self.tick(seconds=5)
        assert self.tick(seconds=5) == "completed"

    def events(self) -> list[str]:
        with self.store.sessions() as session:
            return [e.kind for e in queries.list_events(session, self.rollout_id)]

    def revision(self) -> int:
        with self.store.sessions() as session:
            return queries.get_rollout(session, self.rollout_id).revision


def test_a_rollout_runs_to_completion_through_the_database(store: StoreHandle) -> None:
    """With passing gates, bakes elapse on the fake clock and the rollout completes at 100%."""
    h = Harness(store)
    assert h.tick() == "running"
    assert h.router.read_weight() == RouterState(5)
    assert h.tick(seconds=5) == "running"  # the weight is verified on this tick
    assert h.tick(hours=48) == "running"  # the bake is over, the gate is evaluated after it
    assert h.router.read_weight() == RouterState(25)
    h.tick(seconds=5)
    assert h.tick(hours=48, seconds=1) == "awaiting_promotion"
    h.command("promote")
    h.tick(seconds=5)
    assert h.router.read_weight() == RouterState(100)
    assert h.tick(seconds=5) == "running"  # 100% verified
    assert h.tick(seconds=5) == "completed"
    events = h.events()
    assert events.count("step_completed") == 4
    assert events[-1] == "completed"
    with store.sessions() as session:
        assert queries.pending_actions(session, h.rollout_id) == []
        steps = queries.list_steps(session, h.rollout_id)
    assert [s.weight for s in steps] == [5, 25, 25, 100]
    assert all(s.completed_at is not None for s in steps)


def test_every_evaluation_is_stored_with_its_evidence(store: StoreHandle) -> None:
    """Each gate evaluation is kept with query, value, samples, threshold and verdict."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    with store.sessions() as session:
        latest = queries.latest_evaluations(session, h.rollout_id)
    timeouts = latest["timeouts"]
    assert (timeouts.verdict, timeouts.value, timeouts.samples) == ("pass", 0.002, 500)
    assert timeouts.threshold == "<= 0.01"
    assert timeouts.query == "memory:queue_timeout_rate"
    assert latest["oom"].role == "trigger"


def test_a_trigger_breach_rolls_back_and_ends_at_weight_zero(store: StoreHandle) -> None:
    """An OOM on the canary rolls back at once; the rollout ends rolled_back at weight 0."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    h.metrics.set("oom_events", "canary", 1)
    assert h.tick(seconds=5) == "rolling_back"
    assert h.router.read_weight().weight == 0
    assert h.tick(seconds=5) == "rolled_back"
    assert "rollback_started" in h.events()


def test_abort_from_rolloutctl_rolls_back(store: StoreHandle) -> None:
    """An abort command written by rolloutctl is applied on the next tick."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    h.command("abort", reason="tool arguments look wrong")
    assert h.tick(seconds=1) == "rolling_back"
    assert h.tick(seconds=5) == "rolled_back"
    with store.sessions() as session:
        (command,) = [
            c for c in queries.list_events(session, h.rollout_id) if c.kind == "rollback_started"
        ]
    assert "tool arguments look wrong" in command.detail


def test_an_attempt_written_but_never_performed_is_performed_on_the_next_tick(
    store: StoreHandle,
) -> None:
    """A crash between the decision's commit and its attempt: the next tick, with a router that
    never saw the change, performs the attempt toward the stored fact (no drift: it was owed)."""
    h = Harness(store)
    h.tick()
    with store.sessions.begin() as session:
        (row,) = [a for a in _actions(session, h.rollout_id) if a.kind == "set_weight"]
        queries.reopen_action(session, row.id)
    fresh = MemoryRouter()
    h.reconciler = h.new_reconciler(fresh)
    h.tick(seconds=5)
    assert fresh.read_weight().weight == 5
    assert "drift" not in h.events()
    with store.sessions() as session:
        assert queries.pending_actions(session, h.rollout_id) == []


def test_router_drift_is_repaired_and_recorded(store: StoreHandle) -> None:
    """When someone changes the weight behind rolloutd's back, the desired weight is re-applied."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    h.router.set_weight(50)
    h.tick(seconds=5)
    assert h.router.read_weight().weight == 5
    assert "drift" in h.events()


class IgnoringRouter(MemoryRouter):
    """A load balancer that accepts a weight change and silently keeps the old one."""

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        self.history.append(RouterState(weight, mirror))


def test_a_weight_the_router_does_not_take_keeps_the_step_unreached_and_alerts(
    store: StoreHandle,
) -> None:
    """A read-back mismatch is retried, never counted as reached, and alerted once it persists."""
    h = Harness(store, router=IgnoringRouter())
    for _ in range(STUCK_AFTER_ATTEMPTS + 2):
        h.tick(seconds=5)
    with store.sessions() as session:
        rollout = queries.get_rollout(session, h.rollout_id)
        pending = {a.key for a in queries.pending_actions(session, h.rollout_id)}
        done = queries.done_action_keys(session, h.rollout_id)
    assert rollout.progress["step_verified_at"] is None
    assert "weight@gen1=5" in pending
    assert "alert/stuck/weight@gen1=5" in done
    assert h.events().count("action_failed") >= STUCK_AFTER_ATTEMPTS


def test_a_leader_that_lost_the_lease_writes_nothing(store: StoreHandle) -> None:
    """After another holder takes over, the old leader's tick raises and writes nothing."""
    h = Harness(store)
    h.tick()
    before = h.revision()
    with store.sessions.begin() as session:
        session.execute(
            lease.Lease.__table__.update().values(expires_at=h.clock())  # type: ignore[attr-defined]
        )
    h.acquire("usurper")
    with pytest.raises(NotLeading):
        h.tick(seconds=5)
    assert h.revision() == before
    assert h.router.read_weight().weight == 5


def test_a_lease_expired_in_memory_stops_the_tick_before_any_side_effect(
    store: StoreHandle,
) -> None:
    """A leader whose lease ran out (paused past the TTL) performs no action and writes nothing."""
    h = Harness(store)
    h.held = lease.Held(h.held.name, h.held.holder, h.held.epoch, h.clock() + timedelta(seconds=1))
    before = h.revision()
    with pytest.raises(NotLeading):
        h.tick()
    assert h.revision() == before
    assert h.router.read_weight().weight == 0


class BrokenRouter(MemoryRouter):
    """A load balancer whose configuration cannot carry a weighted split."""

    def check(self) -> None:
        raise PermanentError("backend atlas does not hash on X-Session-Id")


def test_a_router_that_fails_its_preflight_fails_the_rollout(store: StoreHandle) -> None:
    """A rollout whose router cannot do the job ends failed before any traffic moves."""
    h = Harness(store, router=BrokenRouter())
    assert h.tick() == "failed"
    assert h.router.read_weight().weight == 0
    with store.sessions() as session:
        (failed,) = [e for e in queries.list_events(session, h.rollout_id) if e.kind == "failed"]
    assert "X-Session-Id" in failed.detail


def test_missing_metrics_pause_the_rollout_and_it_resumes_when_they_return(
    store: StoreHandle,
) -> None:
    """Inconclusive evaluations past the limit pause the rollout; data coming back resumes it."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    h.metrics.fail("queue_timeout_rate", "canary", "prometheus: connection refused")
    states = [h.tick(seconds=30) for _ in range(4)]
    assert states[-1] == "paused"
    with store.sessions() as session:
        latest = queries.latest_evaluations(session, h.rollout_id)
    assert latest["timeouts"].verdict == "inconclusive"
    assert "connection refused" in (latest["timeouts"].reason or "")
    h.metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
    assert h.tick(seconds=30) == "running"
    assert "resumed" in h.events()


class FlakyRouter(MemoryRouter):
    """A load balancer that is unreachable for the first ``failures`` calls."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise TemporaryError("connection refused")
        super().set_weight(weight, mirror=mirror)


def test_a_transient_router_failure_is_retried_on_the_next_tick(store: StoreHandle) -> None:
    """A weight change that fails once is retried and then verified; no step is skipped."""
    h = Harness(store, router=FlakyRouter(failures=1))
    h.tick()
    assert h.router.read_weight().weight == 0
    h.tick(seconds=5)
    assert h.router.read_weight().weight == 5
    h.tick(seconds=5)
    with store.sessions() as session:
        rollout = queries.get_rollout(session, h.rollout_id)
    assert rollout.progress["step_verified_at"] is not None


def _actions(session: Session, rollout_id: int) -> list[Action]:
    """Every action row of the rollout, oldest first."""
    query = select(Action).where(Action.rollout_id == rollout_id).order_by(Action.id)
    return list(session.scalars(query))


def test_a_command_that_arrives_during_a_tick_is_handled_after_it_was_made(
    store: StoreHandle,
) -> None:
    """An abort written with a later time than the tick's start (it arrived while the tick
    ran) is handled, and its rollback recorded, no earlier than the abort itself: the
    history reads request, then rollback."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    made_at = h.clock() + timedelta(seconds=3)
    with store.sessions.begin() as session:
        submit_command(
            session, h.rollout_id, "abort", actor="alice", reason="bad canary", now=made_at
        )
    assert h.tick() == "rolling_back"
    with store.sessions() as session:
        events = queries.list_events(session, h.rollout_id)
        (command,) = session.scalars(select(CommandRow)).all()
    kinds = [e.kind for e in events]
    assert kinds.index("command") < kinds.index("rollback_started")
    (started,) = [e for e in events if e.kind == "rollback_started"]
    assert started.at >= made_at
    assert command.handled_at is not None and command.handled_at >= made_at


# --- missing data, per gate ------------------------------------------------------------------


def _plan_with(
    on_no_data: object = None,
    *,
    on_inconclusive: str = "pause",
    min_samples: int | None = None,
    max_extension: str | None = None,
) -> dict[str, Any]:
    """PLAN (limit 2) with the timeouts gate's ``on_no_data`` and the first step's
    ``min_samples`` for it (the gate itself needs 100 to judge at all)."""
    plan = copy.deepcopy(PLAN)
    plan["limits"]["on_inconclusive"] = on_inconclusive
    if on_no_data is not None:
        plan["gates"]["timeouts"]["on_no_data"] = on_no_data
    first = plan["steps"][0]
    if min_samples is not None:
        first["min_samples"] = {"timeouts": min_samples}
    if max_extension is not None:
        first["max_extension"] = max_extension
    return plan


def _started(h: Harness) -> None:
    """Start the rollout and verify 5% on the router."""
    h.tick()
    h.tick(seconds=5)


def _progress(h: Harness) -> Progress:
    with h.store.sessions() as session:
        return Progress.from_storage(queries.get_rollout(session, h.rollout_id).progress)


def _events(h: Harness, kind: str) -> list[Any]:
    with h.store.sessions() as session:
        return [e for e in queries.list_events(session, h.rollout_id) if e.kind == kind]


def _alert_topics(h: Harness) -> list[str]:
    with h.store.sessions() as session:
        rows = _actions(session, h.rollout_id)
    return [a.payload["topic"] for a in rows if a.kind == "alert"]


def _cause_metrics(h: Harness) -> dict[tuple[str, str], float]:
    """(family, cause) -> value of the rollout's rollbacks, holds and extensions on /metrics."""
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    body, _ = metrics.exposition()
    names = {"rolloutd_rollbacks_total", "rolloutd_holds_total", "rolloutd_step_extensions_total"}
    return {
        (s.name, s.labels.get("cause", "")): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name in names and s.labels.get("rollout") == str(h.rollout_id)
    }


def test_a_gate_that_holds_pauses_where_the_plan_rolls_back_and_resumes_on_data(
    store: StoreHandle,
) -> None:
    """``on_no_data: hold`` under ``on_inconclusive: rollback``: a metrics outage pauses the
    rollout, counted as a no_data hold; data coming back resumes it."""
    h = Harness(store, plan=_plan_with("hold", on_inconclusive="rollback"))
    _started(h)
    h.metrics.fail("queue_timeout_rate", "canary", "prometheus: connection refused")
    assert [h.tick(seconds=30) for _ in range(3)][-1] == "paused"
    (paused,) = _events(h, "paused")
    assert paused.data == {"cause": "no_data", "gates": ["timeouts"]}
    h.metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
    assert h.tick(seconds=30) == "running"
    counted = _cause_metrics(h)
    assert counted[("rolloutd_holds_total", "no_data")] == 1
    assert counted[("rolloutd_holds_total", "operator")] == 0
    assert sum(v for (name, _), v in counted.items() if name == "rolloutd_rollbacks_total") == 0


def test_a_gate_that_rolls_back_on_missing_data_ends_rolled_back_as_no_data(
    store: StoreHandle,
) -> None:
    """``on_no_data: rollback``: past the limit the rollback starts, the router goes to 0, and
    /metrics counts one rollback with cause no_data."""
    h = Harness(store, plan=_plan_with("rollback"))
    _started(h)
    h.metrics.fail("queue_timeout_rate", "canary", "prometheus: connection refused")
    assert [h.tick(seconds=30) for _ in range(3)][-1] == "rolling_back"
    assert h.router.read_weight().weight == 0
    rollback = _progress(h).rollback
    assert rollback is not None and (rollback.kind, rollback.gate) == ("no_data", "timeouts")
    (started,) = _events(h, "rollback_started")
    assert started.data["cause"] == "no_data"
    assert h.tick(seconds=5) == "rolled_back"
    counted = _cause_metrics(h)
    assert counted[("rolloutd_rollbacks_total", "no_data")] == 1
    for cause in ("gate", "trigger", "abort", "deadline"):
        assert counted[("rolloutd_rollbacks_total", cause)] == 0


def test_rollback_after_holds_then_rolls_back_once_the_gate_went_that_long_without_data(
    store: StoreHandle,
) -> None:
    """``rollback_after: 5m``: paused at the limit, still paused 4.5 minutes after the first
    failed evaluation, rolled back at 5."""
    h = Harness(store, plan=_plan_with({"rollback_after": "5m"}))
    _started(h)
    h.metrics.fail("queue_timeout_rate", "canary", "prometheus: connection refused")
    first = h.clock() + timedelta(seconds=30)
    states = [h.tick(seconds=30) for _ in range(9)]
    assert states[2:] == ["paused"] * 7
    assert h.clock() - first == timedelta(minutes=4)
    assert h.tick(seconds=30) == "paused"
    assert h.tick(seconds=30) == "rolling_back"
    rollback = _progress(h).rollback
    assert rollback is not None and rollback.kind == "no_data"
    assert "without data for 5m" in rollback.cause


def test_a_step_short_of_samples_is_extended_with_an_event_and_an_alert_then_completes(
    store: StoreHandle,
) -> None:
    """500 of the 1000 samples the first step asks for when its 48h bake ends: the bake is
    extended (an event, an alert, one extension on /metrics); 1500 samples complete it."""
    h = Harness(store, plan=_plan_with(min_samples=1000, max_extension="12h"))
    _started(h)
    assert h.tick(hours=48) == "running"
    assert h.router.read_weight().weight == 5
    (extended,) = _events(h, "step_extended")
    assert extended.data["gates"] == {"timeouts": {"samples": 500, "needed": 1000}}
    assert "step_extended" in _alert_topics(h)
    assert _cause_metrics(h)[("rolloutd_step_extensions_total", "")] == 1
    h.tick(hours=1)
    assert len(_events(h, "step_extended")) == 1
    h.metrics.set("queue_timeout_rate", "canary", 0.002, samples=1500)
    h.tick(seconds=30)
    assert h.router.read_weight().weight == 25
    assert "step_completed" in h.events()


def test_a_step_still_short_after_its_extension_holds_until_the_samples_arrive(
    store: StoreHandle,
) -> None:
    """Extension 1h, default rule (hold): still short after it, the rollout pauses and stays
    at 5%; the samples arriving resume it and complete the step."""
    h = Harness(store, plan=_plan_with(min_samples=1000, max_extension="1h"))
    _started(h)
    assert h.tick(hours=48) == "running"
    assert h.tick(hours=1) == "paused"
    assert h.tick(hours=24) == "paused"
    assert h.router.read_weight().weight == 5
    h.metrics.set("queue_timeout_rate", "canary", 0.002, samples=1500)
    assert h.tick(seconds=30) == "running"
    assert h.router.read_weight().weight == 25
    assert h.events().index("resumed") < h.events().index("step_completed")


def test_a_step_still_short_after_its_extension_rolls_back_when_its_gate_says_so(
    store: StoreHandle,
) -> None:
    """Extension 1h, ``on_no_data: rollback``: an endpoint too idle to fill the sample count
    rolls back at the end of the extension; it never reaches 25%."""
    h = Harness(store, plan=_plan_with("rollback", min_samples=1000, max_extension="1h"))
    _started(h)
    h.tick(hours=48)
    assert h.tick(hours=1) == "rolling_back"
    assert h.tick(seconds=5) == "rolled_back"
    assert max(s.weight for s in h.router.history) == 5
    rollback = _progress(h).rollback
    assert rollback is not None and "500 samples of the 1000 the step needs" in rollback.cause


def test_a_gate_both_trigger_and_step_gate_gets_its_final_look(store: StoreHandle) -> None:
    """A compare gate that is a rollback trigger and also judges the canary steps is judged
    once a tick, as a trigger: it still makes the final look at the end of its last step.
    Escalations 6% vs 5% over 3,000 canary sessions are too small a rise for the every-tick
    test, and the final look (z ~ 2.3) rolls back instead of letting the step pass."""
    gates = {
        "esc": {"kind": "compare", "signal": "escalations", "alpha": 0.05},
        "oom": {"kind": "events", "signal": "oom_events"},
    }
    plan = memory_plan(gate="", triggers=("esc", "oom"), gates=gates)
    for step in plan["steps"][:2]:
        step["gates"] = ["esc"]
    h = Harness(store, plan=plan)
    h.metrics.set("escalations", "canary", 180, samples=3000)
    h.metrics.set("escalations", "stable", 850, samples=17000)
    h.tick()
    h.tick(seconds=5)
    assert h.tick(hours=1) == "running"  # mid-bake: the every-tick test cannot reject
    h.tick(hours=47, seconds=1)
    assert h.tick(seconds=5) == "running"  # the 25% step, verified
    assert h.tick(hours=1) == "running"  # its bake is not over: no final look yet
    # The bake ends: the final look over both steps rejects, and the trigger rolls back
    # rather than the step completing into the wait for a promotion.
    assert h.tick(hours=47, seconds=1) == "rolling_back", h.events()
    assert "awaiting_promotion" not in h.events()
    with store.sessions() as session:
        (started,) = [
            e for e in queries.list_events(session, h.rollout_id) if e.kind == "rollback_started"
        ]
    assert "gate esc breached: final look over" in started.detail


def test_the_reconciler_knows_which_rollouts_reach_nothing_over_the_network(
    store: StoreHandle,
) -> None:
    """Once a rollout's plan was read, the scheduler can tell its batches to run in one
    thread: memory twins reach nothing over the network; Prometheus metrics do. Forgetting
    the rollout forgets that too."""
    h = Harness(store)
    h.tick()
    assert h.rollout_id in h.reconciler.local
    h.reconciler.forget(h.rollout_id)
    assert h.rollout_id not in h.reconciler.local

    metrics = {"source": "prometheus", "url": "http://127.0.0.1:9", "templates": "vllm"}
    remote = Harness(store, plan={**PLAN, "service": "other", "metrics": metrics})
    remote.tick()
    assert remote.rollout_id not in remote.reconciler.local
