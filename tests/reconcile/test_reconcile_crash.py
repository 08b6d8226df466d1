"""A kill -9 between storing a new desired weight and sending it leaves nothing wrong.

The reconciler runs in child processes with the ``file`` router and ``file`` metrics. A
child SIGKILLs itself when asked to send a chosen weight: after the decision's transaction
committed the new desired fact and its attempt row, before the router changed. A fresh
child then converges the router to the stored fact, never toward anything older.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from rolloutd.core.progress import Desired, Progress
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.store import queries
from tests.plans import file_plan
from tests.twins import CHILD_LEADER, run_child

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = pytest.mark.slow

# The bake of each canary step; a child whose rollout clock runs this much ahead sees it passed.
BAKE = timedelta(hours=1)

# Ticks of the reconciler in a child process. Every weight handed to the router is appended
# to SENDS; asked to send KILL_AT, the child SIGKILLs itself before the router file changes.
# The rollout clock runs SKEW seconds ahead of the wall clock the lease lives on.
CHILD = (
    textwrap.dedent(
        """
        import os, signal, sys
        from datetime import UTC, datetime, timedelta
        from rolloutd.routers.filedriver import FileRouter

        rollout_id, ticks = int(sys.argv[2]), int(sys.argv[3])
        skew, kill_at, sends = timedelta(seconds=float(sys.argv[4])), int(sys.argv[5]), sys.argv[6]
        real = FileRouter.set_weight

        def set_weight(self, weight, *, mirror=False):
            if weight == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            with open(sends, "a") as log:
                log.write(f"{weight}\\n")
            return real(self, weight, mirror=mirror)

        FileRouter.set_weight = set_weight
        """
    )
    + CHILD_LEADER
    + textwrap.dedent(
        """
        for _ in range(ticks):
            if reconciler.tick(rollout_id).state.value == "rolled_back":
                break
        """
    )
)


class World:
    """A pending rollout on the file router and file metrics (no executor: a rollback moves
    traffic only), stepping 5% -> 25% -> full with an hour's bake and an OOM trigger."""

    def __init__(self, store: StoreHandle, tmp: Path) -> None:
        self.store = store
        self.weight_file = tmp / "weights.json"
        self.metrics_file = tmp / "metrics.json"
        self.sends_file = tmp / "sends.txt"
        self.set_oom_events(0)
        plan_data = file_plan("crash-between-fact-and-send", self.weight_file, self.metrics_file)
        loaded = parse_plan(yaml.safe_dump(plan_data), "plan.yaml")
        with store.sessions.begin() as session:
            self.rollout_id = start_rollout(session, loaded, actor="alice", now=datetime.now(UTC))

    def set_oom_events(self, count: int) -> None:
        """What the metrics file says the canary's OOM count is."""
        self.metrics_file.write_text(json.dumps({"oom_events": {"canary": {"value": count}}}))

    def run(
        self, *, ticks: int, ahead: timedelta = timedelta(0), kill_at: int = -1
    ) -> subprocess.CompletedProcess[str]:
        """Ticks of a fresh reconciler process, taking over the (expired) lease of the last."""
        argv = [str(self.rollout_id), str(ticks), str(ahead.total_seconds()), str(kill_at)]
        return run_child(self.store, CHILD, *argv, str(self.sends_file))

    def at_five_percent(self) -> None:
        """Two ticks: the rollout starts, sends 5% and verifies it on the router."""
        started = self.run(ticks=2)
        assert started.returncode == 0, started.stderr
        assert self.router_weight() == 5
        assert self.progress().step_verified_at is not None

    def router_weight(self) -> int:
        weight: int = json.loads(self.weight_file.read_text())["canary_weight"]
        return weight

    def sends(self) -> list[int]:
        return [int(line) for line in self.sends_file.read_text().split()]

    def progress(self) -> Progress:
        with self.store.sessions.begin() as session:
            return Progress.from_storage(queries.get_rollout(session, self.rollout_id).progress)

    def state(self) -> str:
        with self.store.sessions.begin() as session:
            return queries.get_rollout(session, self.rollout_id).state

    def attempt_status(self, key: str) -> str:
        with self.store.sessions.begin() as session:
            row = queries.action_by_key(session, self.rollout_id, key)
            assert row is not None, f"no attempt {key}"
            return row.status

    def step_verified(self, index: int) -> bool:
        with self.store.sessions.begin() as session:
            rows = queries.list_steps(session, self.rollout_id)
            return any(r.step_index == index and r.verified_at is not None for r in rows)

    def events(self) -> list[str]:
        with self.store.sessions.begin() as session:
            return [e.kind for e in queries.list_events(session, self.rollout_id)]


@pytest.fixture
def world(store: StoreHandle, tmp_path: Path) -> World:
    """The rollout, not started yet, on SQLite and on Postgres."""
    return World(store, tmp_path)


def test_a_kill_9_while_entering_a_step_is_converged_by_the_next_process(world: World) -> None:
    """Killed as it sends 25% after the bake at 5%: 25% is the stored fact with a pending
    attempt while the router reads 5; the next process sends 25, verifies step 1, no drift."""
    world.at_five_percent()
    crashed = world.run(ticks=1, ahead=2 * BAKE, kill_at=25)
    assert crashed.returncode == -9, crashed.stderr
    progress = world.progress()
    assert (progress.step_index, progress.desired) == (1, Desired(25, False, 2))
    assert progress.step_verified_at is None
    assert world.router_weight() == 5
    assert world.attempt_status("weight@gen2=25") == "pending"

    resumed = world.run(ticks=1, ahead=2 * BAKE)
    assert resumed.returncode == 0, resumed.stderr
    assert world.router_weight() == 25
    assert world.attempt_status("weight@gen2=25") == "done"
    progress = world.progress()
    assert progress.step_index == 1 and progress.step_verified_at is not None
    assert world.step_verified(1)
    assert world.sends() == [5, 25]
    assert "drift" not in world.events()


def test_a_kill_9_while_rolling_back_ends_rolled_back_without_raising_the_weight(
    world: World,
) -> None:
    """Killed as it sends 0% after the OOM trigger breached at 5%: 0% and the rollback are
    stored facts while the router reads 5; the next process sends only 0 and ends rolled_back."""
    world.at_five_percent()
    world.set_oom_events(1)
    crashed = world.run(ticks=1, kill_at=0)
    assert crashed.returncode == -9, crashed.stderr
    progress = world.progress()
    assert progress.desired == Desired(0, False, 2)
    assert progress.rollback is not None
    assert (progress.rollback.gate, progress.rollback.phase) == ("crash", "weight")
    assert world.state() == "rolling_back"
    assert world.router_weight() == 5
    assert world.attempt_status("weight@gen2=0") == "pending"

    resumed = world.run(ticks=3)
    assert resumed.returncode == 0, resumed.stderr
    assert world.state() == "rolled_back"
    assert world.router_weight() == 0
    assert world.attempt_status("weight@gen2=0") == "done"
    # The 5 is the first process's, sent before the rollback began.
    assert world.sends() == [5, 0]
    assert world.events().count("rolled_back") == 1
