"""The router write's fence: it starts only while the lease outlives the driver's timeout,
lands within that timeout, and an ended rollout's router stays verified while an
ex-leader's late write could still land.

Wall and rollout time are fake clocks; the lease is a real row (held for 10,000 h), and the
lease the shell checks is the harness's ``held``, moved to end when a test says so.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest
import yaml

from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.reconcile import NotLeading
from rolloutd.routers import deadline
from rolloutd.routers.base import MemoryRouter, RouterState
from rolloutd.routers.filedriver import FileRouter
from tests.reconcile.test_reconcile import PLAN, Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


def _lease_ending_in(store: StoreHandle, seconds: float) -> tuple[Harness, MemoryRouter]:
    """A harness on the memory router whose lease ends ``seconds`` from now, and its router."""
    h = Harness(store)
    h.held = replace(h.held, expires_at=h.clock() + timedelta(seconds=seconds))
    assert isinstance(h.router, MemoryRouter)
    return h, h.router


def test_no_router_write_starts_when_the_lease_ends_within_the_drivers_timeout(
    store: StoreHandle,
) -> None:
    """Lease left 2.5 s (> the 2 s margin, < margin + the memory router's 1 s): nothing sent."""
    h, router = _lease_ending_in(store, 2.5)
    with pytest.raises(NotLeading):
        h.tick()
    assert router.history == []


def test_a_router_write_starts_when_the_lease_outlives_the_drivers_timeout(
    store: StoreHandle,
) -> None:
    """Lease left 3.5 s (> 2 s margin + 1 s timeout): the first step's weight is sent."""
    h, router = _lease_ending_in(store, 3.5)
    assert h.tick() == "running"
    assert router.history == [RouterState(5)]


def test_a_file_router_write_past_its_deadline_changes_nothing(tmp_path: Path) -> None:
    """A write whose deadline passed before the rename (a frozen leader) leaves the file."""
    router = FileRouter(tmp_path / "split.json")
    router.set_weight(0)
    ticks = iter([0.0, 5.0])
    with (
        pytest.raises(deadline.DeadlinePassed),
        deadline.within(timedelta(seconds=1), monotonic=lambda: next(ticks)),
    ):
        router.set_weight(30)
    assert router.read_weight() == RouterState(0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["split.json", "split.json.journal"]
    assert len((tmp_path / "split.json.journal").read_text().splitlines()) == 1


def test_a_file_router_write_within_its_deadline_lands(tmp_path: Path) -> None:
    """Inside its deadline, the write lands as usual."""
    router = FileRouter(tmp_path / "split.json")
    with deadline.within(timedelta(seconds=1)):
        router.set_weight(30)
    assert json.loads((tmp_path / "split.json").read_text())["canary_weight"] == 30


def _rolled_back(store: StoreHandle, router: MemoryRouter | FileRouter) -> Harness:
    h = Harness(store, router=router)
    h.tick()
    h.tick(seconds=5)
    h.metrics.set("oom_events", "canary", 1)
    assert h.tick(seconds=5) == "rolling_back"
    assert h.tick(seconds=5) == "rolled_back"
    assert router.read_weight() == RouterState(0)
    return h


class AfterLateWrite(NamedTuple):
    """What an ended rollout's tick made of an ex-leader's late write."""

    state: str
    watching: bool
    weight: RouterState  # the router's, after the tick
    drifts: int  # drift events recorded, in all


def _late_write(h: Harness, weight: int) -> AfterLateWrite:
    """An ex-leader's write of ``weight`` lands on the router, then the ended rollout ticks."""
    h.router.set_weight(weight)
    result = h.reconciler.tick(h.rollout_id)
    drifts = h.events().count("drift")
    return AfterLateWrite(result.state.value, result.watching, h.router.read_weight(), drifts)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_late_write_after_a_rollback_is_repaired_within_the_window(
    store: StoreHandle, tmp_path: Path, kind: str
) -> None:
    """An ex-leader's late 30% after the rollback is put back to 0% and recorded as drift."""
    router = MemoryRouter() if kind == "memory" else FileRouter(tmp_path / "split.json")
    h = _rolled_back(store, router)
    window = h.reconciler.watch_window(router)
    assert window == 2 * timedelta(seconds=15) + timedelta(seconds=10)
    # The old leader wakes and writes the weight it had committed.
    assert _late_write(h, 30) == ("rolled_back", True, RouterState(0), 1)


def test_a_rollout_ended_before_the_window_is_left_alone(store: StoreHandle) -> None:
    """Past twice the TTL plus the longest write timeout after the end: the router is left."""
    router = MemoryRouter()
    h = _rolled_back(store, router)
    h.clock.advance(seconds=h.reconciler.watch_window(router).total_seconds() + 1)
    assert _late_write(h, 30) == ("rolled_back", False, RouterState(30), 0)


def test_an_ended_rollout_leaves_the_router_to_the_next_rollout_of_its_service(
    store: StoreHandle,
) -> None:
    """Within the window, a newer rollout of the same service and environment owns the
    router: the ended one stops watching rather than fight it back to its final weight."""
    router = MemoryRouter()
    h = _rolled_back(store, router)
    with store.sessions.begin() as session:
        loaded = parse_plan(yaml.safe_dump(PLAN), "plan.yaml")
        start_rollout(session, loaded, actor="bob", now=h.clock())
    # The next rollout's step.
    assert _late_write(h, 30) == ("rolled_back", False, RouterState(30), 0)


def test_a_completed_rollout_is_kept_at_its_final_weight_within_the_window(
    store: StoreHandle,
) -> None:
    """After completion, a late write of an earlier step's weight is put back to 100%."""
    h = Harness(store)
    h.complete()
    assert _late_write(h, 25) == ("completed", True, RouterState(100), 1)
