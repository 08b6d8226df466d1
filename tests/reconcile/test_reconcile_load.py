"""Load-matched judgement through the reconciler, on the simulated fleet.

The reference deployment's shape (three stable replicas, one canary) with a canary build
that is slower only under load: max_seq_len 65,536 leaves it 4 resident sequences against
stable's 9, so it queues once it carries a stable replica's share of the agents. Real agent
sessions go through the session-hash splitter that the ``file`` router feeds, the metrics
come from the fleet in process, and the rollout's clock is a fake one moved by hand (the
engines run 100x faster than GPUs in wall time).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rolloutd.cli import render
from rolloutd.demo.splitter import Splitter
from rolloutd.routers.filedriver import FileRouter
from rolloutd.sim.config import REFERENCE_STABLE
from rolloutd.sim.fleet import Fleet, ReplicaSpec
from rolloutd.sim.traffic import TrafficGenerator
from rolloutd.store import queries
from rolloutd.views import status_view
from tests.plans import memory_plan
from tests.twins import Leader

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = pytest.mark.slow

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TIME_SCALE = 0.01  # engine time dominates the HTTP overhead, so queues form as on GPUs
AGENTS = 40
SLOW_UNDER_LOAD = dataclasses.replace(REFERENCE_STABLE, max_seq_len=65_536)  # 4 resident
MIN_SAMPLES = 20
TARGET_SECONDS = 14.0  # 5%: canary p95 ~10 s; 25%: over 14 s once it queues behind its 4 slots
FLOOR = 0.7  # the latency gate's default min_load_ratio


@dataclass
class World:
    """The fleet, the splitter in front of it, the agents and the file the router writes."""

    fleet: Fleet
    weights: Path
    traffic: TrafficGenerator


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """The reference shape with the slow-under-load canary, and 40 agents through the splitter."""
    specs = [ReplicaSpec(name, "stable") for name in ("gpu-a", "gpu-b", "gpu-c")]
    specs.append(ReplicaSpec("gpu-d", "canary", config=SLOW_UNDER_LOAD))
    weights = tmp_path / "weights.json"
    with Fleet(specs, time_scale=TIME_SCALE) as fleet:
        pools = {pool: list(fleet.urls(pool).values()) for pool in ("stable", "canary")}
        splitter = Splitter(weights, pools).start()
        traffic = TrafficGenerator(
            splitter.url,
            concurrency=AGENTS,
            gateway=fleet.gateway,
            time_scale=TIME_SCALE,
            seed=3,
        ).start()
        try:
            yield World(fleet, weights, traffic)
        finally:
            traffic.stop()
            splitter.stop()


def _plan(world: World) -> dict[str, Any]:
    """5% -> 25% -> full; the latency gate is a rollback trigger, so it is judged at every
    step (and the 25% step's gate too)."""
    replicas = {
        pool: {"replicas": [{"name": n, "url": u} for n, u in world.fleet.urls(pool).items()]}
        for pool in ("stable", "canary")
    }
    return memory_plan(
        name="slow-under-load",
        pools=replicas,
        router={"driver": "file", "path": str(world.weights)},
        metrics={"source": "simulator"},
        artefacts={"stable": "msl32768", "canary": "msl65536"},
        gates={
            "latency": {
                "kind": "latency",
                "signal": "e2e_latency",
                "target_seconds": TARGET_SECONDS,
                "min_samples": MIN_SAMPLES,
                "window": "1h",
            },
        },
        steps=[
            {"kind": "canary", "weight": 5, "bake": "1h"},
            {"kind": "canary", "weight": 25, "bake": "1h", "gates": ["latency"]},
            {"kind": "full"},
        ],
        triggers=("latency",),
    )


class Rollout(Leader):
    """The rollout of ``_plan`` driven by a reconciler on a fake clock, over ``world``."""

    def __init__(self, store: StoreHandle, world: World) -> None:
        router, metrics = FileRouter(world.weights), world.fleet.metrics()
        super().__init__(store, _plan(world), start=T0, router=router, metrics=metrics)

    def latest(self) -> Any:
        """The latency gate's newest stored evaluation."""
        with self.store.sessions() as session:
            return queries.latest_evaluations(session, self.rollout_id)["latency"]

    def tick_until(self, done: Callable[[str, Any], bool], timeout: float = 60.0) -> list[Any]:
        """Tick every half second of real time (5 s on the rollout's clock) until ``done``
        says so; returns the latency gate's evaluations on the way."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.5)
            state = self.tick(seconds=5)
            seen.append(self.latest())
            if done(state, seen[-1]):
                return seen
        raise AssertionError(f"not done after {timeout:g}s: {[e.reason for e in seen]}")

    def status(self) -> dict[str, Any]:
        with self.store.sessions() as session:
            return status_view(session, queries.get_rollout(session, self.rollout_id))


@pytest.fixture
def rollout(store: StoreHandle, world: World) -> Iterator[Rollout]:
    """The rollout, started; its reconciler closed at the end."""
    started = Rollout(store, world)
    yield started
    started.reconciler.close()


@pytest.mark.parametrize("db_backend", ["sqlite"])  # the fleet is the point, not the database
def test_a_canary_slower_only_under_load_is_pending_at_5_percent_and_breaches_at_25(
    rollout: Rollout, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 5% the canary replica carries a sixth of a stable one's load and answers fast: the
    latency gate stays pending, canary underloaded. At 25% its load nears stable's, it
    queues behind its 4 KV slots, and the same gate fails and rolls the rollout back."""
    assert rollout.tick() == "running"
    assert rollout.tick(seconds=5) == "running"  # 5% verified
    at_5 = rollout.tick_until(lambda _, e: (e.samples or 0) >= 40)
    # Nothing passes at 5%. Until a running session hashes to the canary (at the shift the
    # agents' sessions may all hash to stable) there is no data; then too few samples; then
    # an underloaded canary.
    for judged in at_5:
        if judged.verdict == "inconclusive":
            assert judged.reason.startswith("no requests on canary"), judged.reason
            continue
        assert judged.verdict == "pending", judged.reason
        if (judged.samples or 0) >= MIN_SAMPLES:
            assert judged.reason.startswith("canary underloaded (load ratio "), judged.reason
    last = at_5[-1]
    load = last.evidence["load"]
    assert last.reason.startswith(f"canary underloaded (load ratio {load['ratio']:.2f})")
    # A sixth of a stable replica's requests, as planned: not the pools' totals (0.05), not
    # stable's over the canary's (6.3).
    assert load["basis"] == "requests" and 0.1 < load["ratio"] < 0.25
    assert load["planned_ratio"] == pytest.approx(0.158, abs=1e-3)
    assert last.value < TARGET_SECONDS  # it would have passed: fast at low load

    rollout.tick(hours=1)  # the bake is over: 25%
    assert rollout.router.read_weight().weight == 25
    # The canary's measured load per replica climbs towards stable's over the step (0.5 to
    # 0.85 here): below the floor a pass is pending, above it the gate judges. Until the
    # canary's queue has formed its p95 may still pass; once it has, it fails.
    rolled_back = {"rolling_back", "rolled_back"}
    at_25 = rollout.tick_until(lambda state, _: state in rolled_back)
    for judged in at_25[:-1]:
        ratio = judged.evidence["load"]["ratio"]
        enough = (judged.samples or 0) >= MIN_SAMPLES
        expected = "pass" if enough and ratio >= FLOOR else "pending"
        assert judged.verdict == expected, (ratio, judged.samples, judged.reason)
    failed = at_25[-1]
    assert failed.verdict == "fail", (failed.reason, failed.value)
    assert f"is not under the {TARGET_SECONDS:g}s target" in failed.reason
    assert failed.evidence["load"]["planned_ratio"] == pytest.approx(1.0)
    assert failed.evidence["load"]["ratio"] > 2 * load["ratio"]
    assert rollout.router.read_weight().weight == 0

    view = rollout.status()
    assert view["load"]["gate"] == "latency"
    assert view["load"]["ratio"] == pytest.approx(failed.evidence["load"]["ratio"])
    (gate,) = view["gates"]
    assert gate["load_ratio"] == view["load"]["ratio"]
    render.status(view)
    printed = capsys.readouterr().out
    assert "load per replica: canary" in printed and "req/s; ratio" in printed
