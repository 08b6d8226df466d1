"""What a tick costs in work that does not grow with anything useful: counted, never timed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from rolloutd import operations
from rolloutd.operations import start_rollout
from rolloutd.planfile import LoadedPlan, parse_plan
from tests.plans import NO_EXECUTOR
from tests.reconcile.test_reconcile import PLAN, Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


def test_a_plan_is_parsed_once_per_content_hash_across_a_hundred_ticks(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 ticks each of two rollouts of two plans parse each plan once; a later rollout of
    the first plan, its text changed only by a comment, parses nothing."""
    parsed: list[str] = []

    def counting(text: str, source: str, **how: Any) -> LoadedPlan:
        parsed.append(source)
        return parse_plan(text, source, **how)

    monkeypatch.setattr(operations, "_plans", type(operations._plans)())
    monkeypatch.setattr(operations, "parse_plan", counting)
    h = Harness(store)
    with store.sessions.begin() as session:
        production = {**PLAN, "environment": "production", "executor": NO_EXECUTOR}
        other = parse_plan(yaml.safe_dump(production), "other.yaml")
        second = start_rollout(session, other, actor="alice", now=h.clock())
    for _ in range(100):
        h.tick(seconds=5)
        h.reconciler.tick(second)
    assert h.tick() == "running"
    assert len(parsed) == 2, parsed

    h.command("abort", "done measuring")
    while h.tick(seconds=5) != "rolled_back":
        pass
    with store.sessions.begin() as session:
        again = parse_plan("# the same plan\n" + yaml.safe_dump(PLAN), "again.yaml")
        third = start_rollout(session, again, actor="alice", now=h.clock())
    for _ in range(10):
        h.reconciler.tick(third)
        h.clock.advance(seconds=5)
    assert len(parsed) == 2, parsed


def test_a_breach_reaches_the_router_before_the_rest_of_its_batch_is_judged(
    store: StoreHandle,
) -> None:
    """Three rollouts in one batch, the first one's OOM trigger breaching: its router reads
    0% before the other two are measured (it was decided in the batch's transaction, after
    every rollout of the batch had been judged); the other two still tick in one."""

    from rolloutd.core.plan import Plan
    from rolloutd.metrics.sources import MemoryMetrics
    from rolloutd.routers.base import MemoryRouter, RouterState
    from tests.twins import Twins

    order: list[str] = []

    class Watched(MemoryMetrics):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def measure(self, signal: str, pool: Any, window: Any, now: Any) -> Any:
            order.append(f"measure {self.name}")
            return super().measure(signal, pool, window, now)

    class Logged(MemoryRouter):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def set_weight(self, weight: int, *, mirror: bool = False) -> None:
            order.append(f"set {self.name} {weight}")
            super().set_weight(weight, mirror=mirror)

    h = Harness(store)
    ids = [h.rollout_id]
    with store.sessions.begin() as session:
        for i in (1, 2):
            other = parse_plan(yaml.safe_dump({**PLAN, "service": f"svc-{i}"}), f"p{i}.yaml")
            ids.append(start_rollout(session, other, actor="alice", now=h.clock()))
    routers = {i: Logged(f"r{n}") for n, i in enumerate(ids)}
    sources = {i: Watched(f"r{n}") for n, i in enumerate(ids)}
    for source in sources.values():
        source.set("queue_timeout_rate", "canary", 0.002, samples=500)
        source.set("oom_events", "canary", 0)

    class PerRollout(Twins):
        def router(self, rollout_id: int, plan: Plan) -> Any:
            return routers[rollout_id]

        def metrics(self, rollout_id: int, plan: Plan) -> Any:
            return sources[rollout_id]

    h.reconciler.drivers = h.reconciler.performer.drivers = PerRollout(h.router, h.metrics)
    for _ in range(2):  # enter 5%, then verify it
        h.reconciler.tick_many(ids)
        h.clock.advance(seconds=5)
    sources[ids[0]].set("oom_events", "canary", 1)
    order.clear()

    outcomes = h.reconciler.tick_many(ids)

    assert outcomes[ids[0]].state.value == "rolling_back"  # type: ignore[union-attr]
    assert routers[ids[0]].read_weight() == RouterState(0)
    zero = order.index("set r0 0")
    assert zero < order.index("measure r1") < order.index("measure r2"), order
    assert all(outcomes[i].state.value == "running" for i in ids[1:])  # type: ignore[union-attr]
