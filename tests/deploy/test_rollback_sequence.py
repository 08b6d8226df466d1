"""The rollback sequence end to end: weight 0 -> redeploy the pinned stable set on every
canary replica -> verify health and digests -> rolled_back, against a simulated Triton.

The reconciler runs in child processes with the default drivers (``file`` router and
metrics, the ``triton`` executor over HTTP). For the crash tests a child SIGKILLs itself
inside the transaction that would mark a chosen action done -- after the action's effect,
before its record -- and a fresh child takes over from the database alone.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from sqlalchemy import select, update

from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.catalog import build_set, pin
from rolloutd.deploy.executors import build_executor
from rolloutd.operations import start_rollout, submit_command
from rolloutd.planfile import parse_plan
from rolloutd.sim.engine import Replica as SimReplica
from rolloutd.store import queries
from rolloutd.store.artefact_models import DeployRecord
from rolloutd.store.models import Action
from tests.plans import file_plan, pools
from tests.twins import CHILD_LEADER, run_child

from .helpers import CANARY_CONFIG, STABLE_CONFIG, model_tree, pinned

if TYPE_CHECKING:
    from conftest import StoreHandle

MODEL = "atlas-70b"
# The canary step's weight is the first generation of the desired weight, the rollback's 0%
# the second.
ROLLBACK_WEIGHT = "weight@gen2=0"
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# One tick of the reconciler in a child process; CRASH_KEY makes it SIGKILL itself while
# marking that action done (its effect happened, its record did not).
CHILD = (
    textwrap.dedent(
        """
        import os, signal, sys
        from datetime import UTC, datetime, timedelta
        from rolloutd.store import actions, queries
        from rolloutd.store.models import Action

        rollout_id, crash_key, ticks = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
        skew = timedelta(0)
        real = actions.finish_action

        def finish(session, action_id, **kwargs):
            if session.get(Action, action_id).key == crash_key:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(session, action_id, **kwargs)

        queries.finish_action = finish
        """
    )
    + CHILD_LEADER
    + textwrap.dedent(
        """
        for _ in range(ticks):
            state = reconciler.tick(rollout_id).state.value
            if state == "rolled_back":
                break
        print(state)
        """
    )
)


@pytest.fixture
def canary_replica() -> Iterator[SimReplica]:
    """A simulated Triton replica: the canary pool's only one."""
    with SimReplica("c1", pool="canary", time_scale=1e-4) as replica:
        yield replica


class World:
    """A database with the pinned sets, a plan on the file router and the triton executor,
    and its rollout already running the canary build on the simulated replica."""

    def __init__(
        self, store: StoreHandle, replica: SimReplica, tmp: Path, stable: PinnedSet
    ) -> None:
        self.store, self.replica, self.tmp = store, replica, tmp
        self.weight_file = tmp / "weights.json"
        metrics = tmp / "metrics.json"
        metrics.write_text(json.dumps({"oom_events": {"canary": {"value": 0}}}))
        plan_data = file_plan(
            "rollback-sequence",
            self.weight_file,
            metrics,
            steps=[{"kind": "canary", "weight": 10, "bake": "1h"}, {"kind": "full"}],
            pools=pools(canary_url=replica.url, names=("s1", "c1")),
            artefacts={"stable": stable.name, "canary": "build-new"},
            executor={
                "kind": "triton",
                "model": MODEL,
                "versions": {"stable": 1, "canary": 3},
                "poll_interval": "20ms",
                "health_deadline": "1s",
            },
        )
        loaded = parse_plan(yaml.safe_dump(plan_data), "plan.yaml")
        self.plan = loaded.plan
        canary = pinned(tmp, "build-new", CANARY_CONFIG)
        now = datetime.now(UTC)
        with store.sessions.begin() as session:
            pin(session, stable, now=now)
            pin(session, canary, now=now)
            self.rollout_id = start_rollout(session, loaded, actor="alice", now=now)
        # The canary replica runs the new build, as after the forward deploy.
        executor = build_executor(self.plan)
        assert executor.deploy(self.plan.pools.canary.replicas[0], canary).ok
        assert replica.config.max_seq_len == 8192

    def run(self, crash_key: str = "", ticks: int = 12) -> subprocess.CompletedProcess[str]:
        """Ticks of a fresh reconciler process (taking over an expired lease)."""
        return run_child(
            self.store, CHILD, str(self.rollout_id), crash_key, str(ticks), timeout=120
        )

    def abort(self) -> None:
        with self.store.sessions.begin() as session:
            submit_command(
                session,
                self.rollout_id,
                "abort",
                actor="alice",
                reason="drill",
                now=datetime.now(UTC),
            )

    def state(self) -> str:
        with self.store.sessions.begin() as session:
            return queries.get_rollout(session, self.rollout_id).state

    def event_times(self) -> dict[str, datetime]:
        """When each kind of event happened, as the audit log says (the first of each)."""
        with self.store.sessions.begin() as session:
            times: dict[str, datetime] = {}
            for event in queries.list_events(session, self.rollout_id):
                times.setdefault(event.kind, event.at.replace(tzinfo=event.at.tzinfo or UTC))
            return times

    def events(self) -> list[str]:
        with self.store.sessions.begin() as session:
            return [e.kind for e in queries.list_events(session, self.rollout_id)]

    def actions(self) -> dict[str, Action]:
        with self.store.sessions.begin() as session:
            rows = session.scalars(select(Action).where(Action.rollout_id == self.rollout_id))
            return {row.key: row for row in rows}


@pytest.fixture
def world(pg_store: StoreHandle, canary_replica: SimReplica, tmp_path: Path) -> World:
    """The sequence on Postgres (child processes make it slow; SQLite adds nothing here)."""
    return World(pg_store, canary_replica, tmp_path, pinned(tmp_path, "build-old", STABLE_CONFIG))


def _started(world: World) -> None:
    """The rollout reaches canary 10% on the file router, then an operator aborts."""
    assert world.run(ticks=2).returncode == 0
    assert json.loads(world.weight_file.read_text())["canary_weight"] == 10
    world.abort()


def test_abort_redeploys_the_pinned_stable_set_and_verifies_it(world: World) -> None:
    """Weight 0, then version 1 at 32,768 with the stable digest on the canary replica,
    verified, and only then rolled_back; every step is an action done once."""
    _started(world)
    finished = world.run()
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines()[-1] == "rolled_back"
    assert json.loads(world.weight_file.read_text())["canary_weight"] == 0
    config = world.replica.config
    assert (config.max_seq_len, config.version) == (32768, 1)
    kinds = world.events()
    order = ["rollback_started", "artefacts_deployed", "replica_verified", "rolled_back"]
    assert [k for k in kinds if k in order] == order
    done = {k: a.status for k, a in world.actions().items()}
    assert done[ROLLBACK_WEIGHT] == done["rollback/deploy/c1"] == "done"
    assert done["rollback/verify/c1"] == "done"
    with world.store.sessions.begin() as session:
        (record,) = session.scalars(select(DeployRecord)).all()
        assert (record.step, record.ok, record.set_name) == ("rollback", True, "build-old")


def test_the_audit_log_stamps_a_redeploy_when_it_finished_not_when_the_tick_began(
    world: World,
) -> None:
    """The model load takes 1.5 s: ``artefacts_deployed`` and ``replica_verified`` are stamped
    when the replica answered, at least that long after the rollback started, in order."""
    load_seconds = 1.5
    world.replica.load_delay_s = load_seconds / world.replica.time_scale
    _started(world)
    finished = world.run()
    assert finished.stdout.splitlines()[-1] == "rolled_back", finished.stderr
    at = world.event_times()
    deployed = (at["artefacts_deployed"] - at["rollback_started"]).total_seconds()
    assert deployed >= load_seconds, at
    assert at["rollback_started"] <= at["artefacts_deployed"] <= at["replica_verified"], at
    assert at["replica_verified"] <= at["rolled_back"], at


@pytest.mark.parametrize(
    "crash_key",
    [ROLLBACK_WEIGHT, "rollback/deploy/c1", "rollback/verify/c1"],
)
def test_a_kill_9_between_steps_resumes_where_it_stopped(world: World, crash_key: str) -> None:
    """SIGKILL after an action's effect, before its record: the next process replays it
    (redeploying what already runs is a no-op) and finishes the sequence."""
    _started(world)
    crashed = world.run(crash_key)
    assert crashed.returncode == -9, crashed.stderr
    assert world.state() == "rolling_back"
    assert world.actions()[crash_key].status == "pending"
    resumed = world.run()
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[-1] == "rolled_back"
    assert (world.replica.config.max_seq_len, world.replica.config.version) == (32768, 1)
    assert world.events().count("rolled_back") == 1


def test_a_stable_set_that_will_not_come_up_keeps_the_rollout_rolling_back(
    pg_store: StoreHandle, canary_replica: SimReplica, tmp_path: Path
) -> None:
    """A stable set whose config does not fit: every redeploy fails, is retried with
    backoff, the third failure alerts action_stuck, and the rollout never says rolled_back."""
    oom = build_set(
        "build-old",
        model_tree(tmp_path / "oom", "oom"),
        "trtllm",
        {"max_seq_len": 32768, "kv_cache_free_gpu_mem_fraction": 0.3},
    )
    store = pg_store
    world = World(store, canary_replica, tmp_path, oom)
    _started(world)
    for _ in range(4):
        world.run(ticks=3)
        # Skip the backoff, as time would.
        with store.sessions.begin() as session:
            session.execute(update(Action).values(next_attempt_at=None))
    assert world.state() == "rolling_back"
    deploy = world.actions()["rollback/deploy/c1"]
    assert deploy.status == "pending" and deploy.attempts >= 3
    assert "out of memory" in (deploy.last_error or "")
    assert "rollback/verify/c1" not in world.actions()
    stuck = world.actions()["alert/stuck/rollback/deploy/c1"]
    assert stuck.payload["topic"] == "action_stuck"
    assert "rolled_back" not in world.events()
    assert json.loads(world.weight_file.read_text())["canary_weight"] == 0
