"""Upgrading to the weight journal (0006) with rollouts in flight: they carry on and finish.

The rows are the ones the previous revision wrote: progress without desired facts or a
rollback phase, weight actions keyed ``step-<i>/weight-<w>`` and ``rollback/weight-0``.
One rollout is mid-step with its 25% change still pending (the router at 5%), one is rolling
back with its 0% change pending (the router at 25%).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from alembic import command
from alembic.config import Config
from sqlalchemy import JSON, Boolean, Integer, String, Text, column, insert, select, table

from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.operations import submit_command
from rolloutd.planfile import parse_plan
from rolloutd.reconcile import Reconciler
from rolloutd.routers.base import MemoryRouter, Router, RouterState
from rolloutd.store import lease
from rolloutd.store.db import make_engine, migrations_config_path, session_factory, upgrade
from rolloutd.store.models import Action
from rolloutd.store.timestamps import UTCDateTime
from tests.reconcile.test_reconcile import PLAN
from tests.twins import Clock, Twins

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _old_progress(**facts: Any) -> dict[str, Any]:
    """Progress as revision 0005 stored it: no ``desired``, no rollback ``phase``."""
    progress = {
        "started_at": T0.isoformat(),
        "step_index": 0,
        "step_entered_at": T0.isoformat(),
        "step_verified_at": None,
        "baked_seconds": 0.0,
        "bake_mark": None,
        "promoted": False,
        "promoted_after_seconds": 0.0,
        "paused": None,
        "inconclusive_streaks": {},
        "last_seen": {},
        "rollback": None,
        "ended": None,
        "ended_at": None,
    }
    progress.update(facts)
    return progress


class PerRollout:
    """Drivers that give each rollout its own memory router."""

    def __init__(self, routers: dict[int, Router], metrics: MemoryMetrics) -> None:
        self.routers = routers
        self.metrics_source = metrics

    def router(self, rollout_id: int, plan: Any) -> Router:
        return self.routers[rollout_id]

    def metrics(self, rollout_id: int, plan: Any) -> MemoryMetrics:
        return self.metrics_source

    def executor(self, rollout_id: int, plan: Any) -> Any:
        return Twins(MemoryRouter(), self.metrics_source).executor(rollout_id, plan)

    def forget(self, rollout_id: int) -> None:
        """Kept for the test's life."""


_ROLLOUTS_0005 = table(
    "rollouts",
    column("id", Integer),
    *(column(name, String) for name in ("name", "service", "environment", "state")),
    column("active", Boolean),
    *(column(name, Text) for name in ("plan_hash", "plan_source", "plan_path")),
    column("progress", JSON),
    column("revision", Integer),
    column("created_by", String),
    column("created_at", UTCDateTime),
    column("updated_at", UTCDateTime),
)


def _rollouts_on_0005(db_url: str) -> dict[str, int]:
    """Two rollouts in flight, as revision 0005 left them."""
    config = Config(str(migrations_config_path()))
    config.attributes["url"] = db_url
    config.attributes["configure_logger"] = False
    command.upgrade(config, "0005")
    engine = make_engine(db_url)
    sessions = session_factory(engine)
    ids = {}
    progress = {
        "advancing": (
            "running",
            _old_progress(step_index=1, step_entered_at=(T0 + HOUR).isoformat()),
        ),
        "rolling-back": (
            "rolling_back",
            _old_progress(
                step_index=1,
                step_verified_at=(T0 + HOUR).isoformat(),
                rollback={"cause": "gate oom breached", "started_at": (T0 + 2 * HOUR).isoformat()},
            ),
        ),
    }
    with sessions.begin() as session:
        for service, (state, old) in progress.items():
            data = copy.deepcopy(PLAN)
            data["service"] = service
            loaded = parse_plan(yaml.safe_dump(data), f"{service}.yaml")
            # The rollout row as revision 0005 had it (today's model has more columns).
            ids[service] = session.execute(
                insert(_ROLLOUTS_0005).returning(_ROLLOUTS_0005.c.id),
                {
                    "name": loaded.plan.name,
                    "service": service,
                    "environment": loaded.plan.environment,
                    "state": state,
                    "active": True,
                    "plan_hash": loaded.content_hash,
                    "plan_source": loaded.text,
                    "plan_path": loaded.source,
                    "progress": old,
                    "revision": 0,
                    "created_by": "alice",
                    "created_at": T0,
                    "updated_at": T0,
                },
            ).scalar_one()
        old = [
            (ids["advancing"], "step-0/weight-5", 5, "done"),
            (ids["advancing"], "step-1/weight-25", 25, "pending"),
            (ids["rolling-back"], "step-1/weight-25", 25, "done"),
            (ids["rolling-back"], "rollback/weight-0", 0, "pending"),
        ]
        for rollout_id, key, weight, status in old:
            session.add(
                Action(
                    rollout_id=rollout_id,
                    key=key,
                    kind="set_weight",
                    payload={"weight": weight, "mirror": False},
                    status=status,
                    attempts=0,
                    created_at=T0,
                )
            )
    engine.dispose()
    return ids


def test_rollouts_in_flight_on_0005_finish_after_the_upgrade(db_url: str) -> None:
    """A rollout with a stale pending 25% change reaches 25% and completes; one rolling back
    with its 0% pending ends rolled_back at 0%; the old-style weight actions are superseded
    and never sent."""
    ids = _rollouts_on_0005(db_url)
    upgrade(db_url)
    engine = make_engine(db_url)
    sessions = session_factory(engine)

    routers: dict[int, Router] = {
        ids["advancing"]: MemoryRouter(),
        ids["rolling-back"]: MemoryRouter(),
    }
    routers[ids["advancing"]].set_weight(5)
    routers[ids["rolling-back"]].set_weight(25)
    metrics = MemoryMetrics()
    metrics.set("queue_timeout_rate", "canary", 0.002, samples=500)
    metrics.set("oom_events", "canary", 0)
    clock = Clock(T0 + 3 * HOUR)
    with sessions.begin() as session:
        held = lease.acquire(session, holder="new", ttl=timedelta(hours=1000), now=clock())
    reconciler = Reconciler(
        sessions,
        PerRollout(routers, metrics),
        clock=clock,
        lease=lambda: held,
        instance="upgraded",
    )
    for _ in range(3):
        clock.advance(seconds=5)
        states = {name: reconciler.tick(i).state.value for name, i in ids.items()}
    assert states["rolling-back"] == "rolled_back"
    assert routers[ids["rolling-back"]].read_weight() == RouterState(0)
    assert routers[ids["advancing"]].read_weight() == RouterState(25)
    clock.advance(hours=48, seconds=5)
    reconciler.tick(ids["advancing"])
    clock.advance(seconds=5)
    assert reconciler.tick(ids["advancing"]).state.value == "awaiting_promotion"
    with sessions.begin() as session:
        submit_command(
            session, ids["advancing"], "promote", actor="alice", reason=None, now=clock()
        )
    for _ in range(3):
        clock.advance(seconds=5)
        state = reconciler.tick(ids["advancing"]).state.value
    assert state == "completed"
    assert routers[ids["advancing"]].read_weight() == RouterState(100)
    with sessions.begin() as session:
        rows = session.scalars(select(Action).where(Action.kind == "set_weight")).all()
        status = {(r.rollout_id, r.key): r.status for r in rows}
    assert status[(ids["advancing"], "step-1/weight-25")] == "superseded"
    assert status[(ids["rolling-back"], "rollback/weight-0")] == "superseded"
    # Every weight the new code sent was toward a fact: none of the old keys was performed.
    assert all(
        r.key.startswith("weight@gen") for r in rows if r.status == "done" and r.created_at > T0
    )
    engine.dispose()
