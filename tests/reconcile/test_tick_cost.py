"""What a tick costs in work that does not grow with anything useful: counted, never timed."""

from __future__ import annotations

import gc
import inspect
from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from rolloutd import operations
from rolloutd.gates.base import Measurement, Pool
from rolloutd.gates.load import LOAD_INFLIGHT, LOAD_REQUESTS
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.operations import start_rollout
from rolloutd.planfile import LoadedPlan, parse_plan
from rolloutd.store import queries
from tests.plans import NO_EXECUTOR, memory_plan
from tests.reconcile.test_reconcile import PLAN, Harness
from tests.store.seed import copy_rollout, statements
from tests.twins import Leader

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


class _Batch:
    """Three rollouts of the reconcile tests' plan ticked as one batch, each on a router
    and a metrics source of its own that log, in order, each weight read or set and each
    signal measured (``read r0``, ``set r0 5``, ``measure r0 oom_events``); their 5% is
    entered and verified."""

    def __init__(self, store: StoreHandle) -> None:
        from rolloutd.core.plan import Plan
        from rolloutd.routers.base import MemoryRouter
        from tests.twins import Twins

        order: list[str] = []
        self.order = order

        class Watched(MemoryMetrics):
            def __init__(self, name: str) -> None:
                super().__init__()
                self.name = name

            def measure(self, signal: str, pool: Any, window: Any, now: Any) -> Any:
                order.append(f"measure {self.name} {signal}")
                return super().measure(signal, pool, window, now)

        class Logged(MemoryRouter):
            def __init__(self, name: str) -> None:
                super().__init__()
                self.name = name

            def read_weight(self) -> Any:
                order.append(f"read {self.name}")
                return super().read_weight()

            def set_weight(self, weight: int, *, mirror: bool = False) -> None:
                order.append(f"set {self.name} {weight}")
                super().set_weight(weight, mirror=mirror)

        self.h = h = Harness(store)
        self.ids = ids = [h.rollout_id]
        with store.sessions.begin() as session:
            for i in (1, 2):
                other = parse_plan(yaml.safe_dump({**PLAN, "service": f"svc-{i}"}), f"p{i}.yaml")
                ids.append(start_rollout(session, other, actor="alice", now=h.clock()))
        self.routers = routers = {i: Logged(f"r{n}") for n, i in enumerate(ids)}
        self.sources = sources = {i: Watched(f"r{n}") for n, i in enumerate(ids)}
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

    def breach(self, n: int) -> dict[int, Any]:
        """Tick the batch with rollout ``n``'s OOM trigger breaching, the log cleared before."""
        self.sources[self.ids[n]].set("oom_events", "canary", 1)
        self.order.clear()
        return self.h.reconciler.tick_many(self.ids)

    def first(self, prefix: str) -> int:
        """Where the first entry of the log starting with ``prefix`` is."""
        return next(n for n, entry in enumerate(self.order) if entry.startswith(prefix))


def test_a_breach_reaches_the_router_before_the_rest_of_its_batch_is_judged(
    store: StoreHandle,
) -> None:
    """Three rollouts in one batch, the first one's OOM trigger breaching: its router reads
    0% before the other two are measured (it was decided in the batch's transaction, after
    every rollout of the batch had been judged); the other two still tick in one."""
    from rolloutd.routers.base import RouterState

    batch = _Batch(store)
    ids, order, routers = batch.ids, batch.order, batch.routers

    outcomes = batch.breach(0)

    assert outcomes[ids[0]].state.value == "rolling_back"  # type: ignore[union-attr]
    assert routers[ids[0]].read_weight() == RouterState(0)
    zero = order.index("set r0 0")
    assert zero < batch.first("measure r1") < batch.first("measure r2"), order
    assert all(outcomes[i].state.value == "running" for i in ids[1:])  # type: ignore[union-attr]


def test_every_rollouts_triggers_are_judged_before_any_rollout_is_observed(
    store: StoreHandle,
) -> None:
    """Three rollouts in one batch, the last one's OOM trigger breaching: every rollout's
    triggers are judged first, so its router reads 0% before the other routers are read and
    their step gates measured (it waited for the two before it to be observed whole, a place
    in the batch that a batch of one does not have); the two others still tick in one, each
    gate judged once."""
    from rolloutd.routers.base import RouterState

    batch = _Batch(store)
    ids, order, routers = batch.ids, batch.order, batch.routers
    batch.h.clock.advance(seconds=30)  # the step gates are due again

    outcomes = batch.breach(2)

    assert outcomes[ids[2]].state.value == "rolling_back"  # type: ignore[union-attr]
    assert routers[ids[2]].read_weight() == RouterState(0)
    zero = order.index("set r2 0")
    assert order[:zero].count("measure r0 oom_events") == 1
    assert order[:zero].count("measure r1 oom_events") == 1
    others = [e for e in order[:zero] if " r2" not in e and "oom_events" not in e]
    assert others == [], order  # no router of the others read, no step gate of theirs measured
    assert zero < order.index("read r0") < order.index("read r1"), order
    assert order.count("measure r0 queue_timeout_rate") == 1  # the step gate, once
    assert order.count("measure r0 oom_events") == 1  # the trigger, judged first, not again
    assert all(outcomes[i].state.value == "running" for i in ids[:2])  # type: ignore[union-attr]


class Counting:
    """A memory source that counts each question it is asked."""

    def __init__(self, inner: MemoryMetrics) -> None:
        self.inner = inner
        self.asked: Counter[tuple[str, str]] = Counter()

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        self.asked[(signal, pool)] += 1
        return self.inner.measure(signal, pool, window, now)


def test_a_tick_asks_each_pools_load_once_however_many_gates_record_it(
    store: StoreHandle,
) -> None:
    """Two latency gates each record both pools' load; their tick asks the source for each
    load figure once (and each gate's own signal once), and a figure the source cannot give
    is asked once too, its error shared by both gates."""
    metrics = MemoryMetrics()
    counting = Counting(metrics)
    gates = {
        "ttft": {"kind": "threshold", "signal": "ttft_p99", "max": 2.0},
        "e2e": {"kind": "threshold", "signal": "e2e_latency", "max": 5.0},
        "oom": {"kind": "events", "signal": "oom_events"},
    }
    plan = memory_plan(
        gate="",
        steps=[{"kind": "canary", "weight": 5, "bake": "48h", "gates": ["ttft", "e2e"]}],
        gates=gates,
    )
    leader = Leader(store, plan, metrics=counting)
    for signal, value in (("ttft_p99", 0.5), ("e2e_latency", 1.0), ("oom_events", 0)):
        metrics.set(signal, "canary", value, samples=500)
    metrics.set(LOAD_REQUESTS, "canary", 1.0)
    metrics.set(LOAD_REQUESTS, "stable", 3.0)  # the in-flight figure is not set: no data
    leader.tick()
    counting.asked.clear()
    leader.tick(seconds=5)  # the weight is verified; every gate is due
    assert counting.asked == {
        ("ttft_p99", "canary"): 1,
        ("e2e_latency", "canary"): 1,
        ("oom_events", "canary"): 1,
        (LOAD_REQUESTS, "canary"): 1,
        (LOAD_REQUESTS, "stable"): 1,
        (LOAD_INFLIGHT, "canary"): 1,
        (LOAD_INFLIGHT, "stable"): 1,
    }
    with store.sessions() as session:
        latest = queries.latest_evaluations(session, leader.rollout_id)
    for gate in ("ttft", "e2e"):
        load = latest[gate].evidence["load"]
        assert (load["ratio"], load["basis"]) == (pytest.approx(1 / 3), "requests")
        assert load["canary"]["problems"] == [f"no data for {LOAD_INFLIGHT} on canary"]


def test_a_tick_leaves_nothing_in_a_reference_cycle(store: StoreHandle) -> None:
    """What a tick makes is freed when the tick ends, failures included (here the in-flight
    load the source has no data for): a kept exception holds its traceback's frames, and
    each tick's cycles would wait for a full collection, which at 10,000 rollouts scans
    some 600,000 objects for most of a second."""
    metrics = MemoryMetrics()
    leader = Leader(
        store,
        memory_plan(
            gate="",
            steps=[{"kind": "canary", "weight": 5, "bake": "48h", "gates": ["ttft"]}],
            gates={
                "ttft": {"kind": "threshold", "signal": "ttft_p99", "max": 2.0},
                "oom": {"kind": "events", "signal": "oom_events"},
            },
        ),
        metrics=metrics,
    )
    metrics.set("ttft_p99", "canary", 0.5, samples=500)
    metrics.set("oom_events", "canary", 0)
    metrics.set(LOAD_REQUESTS, "canary", 1.0)
    leader.tick()
    leader.tick(seconds=5)  # every cache a tick fills is filled
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(5):
            leader.tick(seconds=30)
        gc.collect()
        cyclic = [o for o in gc.garbage if type(o).__module__.startswith("rolloutd")]
        frames = [o for o in gc.garbage if inspect.isframe(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert (cyclic, frames) == ([], [])
    with store.sessions() as session:
        latest = queries.latest_evaluations(session, leader.rollout_id)
    assert latest["ttft"].evidence["load"]["unknown"]  # a failure was on the road


def test_a_batch_reads_its_rollouts_actions_and_steps_in_a_statement_each(
    store: StoreHandle,
) -> None:
    """Reading the facts of ten rollouts costs as many statements on the rollouts, actions and
    steps tables as reading one: one each for the batch (only the newest verdicts are looked
    up a rollout at a time, an index lookup a gate)."""
    from rolloutd.reconcile.facts import read_many

    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    copies = copy_rollout(store.engine, h.rollout_id, 9, with_evaluations=True)

    def tables_read(ids: list[int]) -> Counter[str]:
        with statements(store.engine) as seen, store.sessions() as session:
            found = read_many(session, ids, {})
        assert sorted(found) == sorted(ids)
        assert all(f.rollout.id == i for i, f in found.items() if not isinstance(f, Exception))
        return Counter(
            table
            for sql in seen
            for table in ("FROM rollouts", "FROM actions", "FROM step_progress")
            if table in sql
        )

    one, ten = tables_read([h.rollout_id]), tables_read([h.rollout_id, *copies])
    assert one == ten and set(one) == {"FROM rollouts", "FROM actions", "FROM step_progress"}
    assert max(one.values()) <= 2  # rollouts: the batch's rows (and a successor of an ended one)


def test_a_new_leaders_first_tick_of_a_baking_rollout_claims_it_and_keeps_its_facts(
    store: StoreHandle,
) -> None:
    """Under a new lease epoch the first tick of a baking rollout writes its progress (the row
    says who drives it) and nothing else: what the leader read of it stays true, so the next
    tick reads the rollout from memory, not again from the database."""
    h = Harness(store)
    h.tick()
    h.tick(seconds=5)
    h.tick(seconds=5)
    h.reconciler.known.under(h.reconciler.known.epoch + 1)  # as after a takeover
    before = h.revision()
    h.tick(seconds=5)
    assert h.revision() == before + 1
    with statements(store.engine) as seen:
        assert h.tick(seconds=5) == "running"
    assert h.revision() == before + 1
    assert not [sql for sql in seen if "FROM rollouts" in sql]


def test_an_ended_rollout_is_judged_no_more(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a rollout completed, its ticks (its router is still watched a while) ask its
    metrics nothing: no trigger is due, even one that would breach, since its triggers
    are judged ahead of its turn in the batch."""
    h = Harness(store)
    h.complete()
    asked: list[str] = []
    measure = h.metrics.measure
    monkeypatch.setattr(
        h.metrics, "measure", lambda signal, *rest: asked.append(signal) or measure(signal, *rest)
    )
    h.metrics.set("oom_events", "canary", 1)
    assert h.tick(seconds=1) == "completed"
    assert h.tick(seconds=1) == "completed"
    assert asked == []
