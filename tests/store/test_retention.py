"""Retention: a long-ended rollout's evaluations are compacted to the decisive ones."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from rolloutd.store import queries
from rolloutd.store.models import Event, GateEvaluation
from rolloutd.store.retention import DECISIVE_EVENTS, compact, ended_before
from rolloutd.views import history_view, status_view
from tests.plans import memory_plan
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

STEPS = [
    {"kind": "canary", "weight": 5, "bake": "1h", "gates": ["timeouts"]},
    {"kind": "canary", "weight": 25, "bake": "48h", "gates": ["timeouts"]},
    {"kind": "full"},
]


def _lived(store: StoreHandle) -> Harness:
    """A rollout ticked every minute for three hours: its data goes missing for a while (a
    pause, then a resume), it is promoted after its first bake, and an OOM rolls it back."""
    h = Harness(store, plan=memory_plan(steps=STEPS, limits={"max_inconclusive": 2}))
    h.tick()
    for minute in range(1, 181):
        if minute == 20:
            h.metrics.fail("queue_timeout_rate", "canary", "no data")
        if minute == 26:
            h.metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
        if minute == 170:
            h.metrics.set("oom_events", "canary", 1)
        h.tick(seconds=60)
    assert h.tick(seconds=60) == "rolled_back"
    return h


def _rows(store: StoreHandle, rollout_id: int) -> list[Any]:
    with store.sessions() as session:
        query = (
            select(GateEvaluation)
            .where(GateEvaluation.rollout_id == rollout_id)
            .order_by(GateEvaluation.evaluated_at, GateEvaluation.id)
        )
        return list(session.scalars(query))


def _decisive(store: StoreHandle, rollout_id: int, rows: list[Any]) -> set[int]:
    """The ids of the evaluations that changed a verdict, and of the newest evaluation of each
    gate when a decision (rollback, pause, promotion, ...) was made."""
    with store.sessions() as session:
        times = list(
            session.scalars(
                select(Event.at).where(
                    Event.rollout_id == rollout_id, Event.kind.in_(DECISIVE_EVENTS)
                )
            )
        )
    ids: set[int] = set()
    previous: dict[tuple[str, int], str] = {}
    for row in rows:
        if previous.get((row.gate, row.step_index)) != row.verdict:
            ids.add(row.id)
        previous[(row.gate, row.step_index)] = row.verdict
    for at in times:
        newest = {row.gate: row.id for row in rows if row.evaluated_at <= at}
        ids.update(newest.values())
    return ids


def test_compaction_keeps_every_decisive_evaluation_and_the_history(store: StoreHandle) -> None:
    """After compaction, every evaluation that changed a verdict or stood at a decision is
    still there, one per gate per hour remains, and ``history`` and ``status`` read as
    before; compacting again deletes nothing."""
    h = _lived(store)
    rows = _rows(store, h.rollout_id)
    decisive = _decisive(store, h.rollout_id, rows)
    with store.sessions() as session:
        kinds = {e.kind for e in queries.list_events(session, h.rollout_id)}
        history = history_view(session, h.rollout_id)
        status = status_view(session, queries.get_rollout(session, h.rollout_id))
    assert {"paused", "resumed", "step_completed", "rollback_started"} <= kinds

    with store.sessions.begin() as session:
        assert ended_before(session, h.clock() - timedelta(hours=1)) == []
        assert ended_before(session, h.clock() + timedelta(days=1)) == [h.rollout_id]
        done = compact(session, h.rollout_id)

    left = _rows(store, h.rollout_id)
    assert done.deleted == len(rows) - len(left) > len(rows) / 2
    assert decisive <= {row.id for row in left}
    hours = {(row.gate, row.evaluated_at.replace(minute=0, second=0)) for row in rows}
    assert hours <= {(row.gate, row.evaluated_at.replace(minute=0, second=0)) for row in left}
    with store.sessions.begin() as session:
        assert history_view(session, h.rollout_id) == history
        assert status_view(session, queries.get_rollout(session, h.rollout_id)) == status
        assert compact(session, h.rollout_id).deleted == 0


def test_a_dry_run_deletes_nothing(store: StoreHandle) -> None:
    """``dry_run`` reports what would go and leaves every row."""
    h = _lived(store)
    before = len(_rows(store, h.rollout_id))
    with store.sessions.begin() as session:
        done = compact(session, h.rollout_id, dry_run=True)
    assert done.deleted > 0
    assert len(_rows(store, h.rollout_id)) == before
