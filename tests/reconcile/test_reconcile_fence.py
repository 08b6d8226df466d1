"""The router write's fence: it starts only while the lease outlives the driver's timeout,
lands within that timeout, and an ended rollout's router stays verified while an
ex-leader's late write could still land.

Wall and rollout time are fake clocks; the lease is a real row (held for 1000 h), and the
lease the shell checks is the harness's ``held``, moved to end when a test says so.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

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


def _lease_ends_in(h: Harness, seconds: float) -> None:
    h.held = replace(h.held, expires_at=h.clock() + timedelta(seconds=seconds))


def test_no_router_write_starts_when_the_lease_ends_within_the_drivers_timeout(
    store: StoreHandle,
) -> None:
    """Lease left 2.5 s (> the 2 s margin, < margin + the memory router's 1 s): nothing sent."""
    h = Harness(store)
    router = h.router
    assert isinstance(router, MemoryRouter)
    _lease_ends_in(h, 2.5)
    with pytest.raises(NotLeading):
        h.tick()
    assert router.history == []


def test_a_router_write_starts_when_the_lease_outlives_the_drivers_timeout(
    store: StoreHandle,
) -> None:
    """Lease left 3.5 s (> 2 s margin + 1 s timeout): the first step's weight is sent."""
    h = Harness(store)
    router = h.router
    assert isinstance(router, MemoryRouter)
    _lease_ends_in(h, 3.5)
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


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_late_write_after_a_rollback_is_repaired_within_the_window(
    store: StoreHandle, tmp_path: Path, kind: str
) -> None:
    """An ex-leader's late 30% after the rollback is put back to 0% and recorded as drift."""
    router = MemoryRouter() if kind == "memory" else FileRouter(tmp_path / "split.json")
    h = _rolled_back(store, router)
    window = h.reconciler.watch_window(router)
    assert window == 2 * timedelta(seconds=15) + timedelta(seconds=10)
    router.set_weight(30)  # the old leader wakes and writes the weight it had committed
    result = h.reconciler.tick(h.rollout_id)
    assert result.state.value == "rolled_back"
    assert result.watching
    assert router.read_weight() == RouterState(0)
    assert h.events().count("drift") == 1


def test_a_rollout_ended_before_the_window_is_left_alone(store: StoreHandle) -> None:
    """Past twice the TTL plus the longest write timeout after the end: the router is left."""
    router = MemoryRouter()
    h = _rolled_back(store, router)
    h.clock.advance(seconds=h.reconciler.watch_window(router).total_seconds() + 1)
    router.set_weight(30)
    result = h.reconciler.tick(h.rollout_id)
    assert not result.watching
    assert router.read_weight() == RouterState(30)
    assert "drift" not in h.events()


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
    router.set_weight(30)  # the next rollout's step
    result = h.reconciler.tick(h.rollout_id)
    assert not result.watching
    assert router.read_weight() == RouterState(30)
    assert "drift" not in h.events()


def test_a_completed_rollout_is_kept_at_its_final_weight_within_the_window(
    store: StoreHandle,
) -> None:
    """After completion, a late write of an earlier step's weight is put back to 100%."""
    h = Harness(store)
    router = h.router
    h.tick()
    h.tick(seconds=5)
    h.tick(hours=48)
    h.tick(seconds=5)
    h.tick(hours=48, seconds=1)
    h.command("promote")
    h.tick(seconds=5)
    h.tick(seconds=5)
    assert h.tick(seconds=5) == "completed"
    router.set_weight(25)
    assert h.reconciler.tick(h.rollout_id).watching
    assert router.read_weight() == RouterState(100)
    assert h.events().count("drift") == 1
