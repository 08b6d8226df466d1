"""The triton executor against a simulated replica's model repository API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rolloutd.core.plan import Plan, Replica
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.catalog import build_set
from rolloutd.deploy.executors import build_executor
from rolloutd.deploy.triton import TritonDeployer
from rolloutd.errors import BadInput
from rolloutd.sim.engine import Replica as SimReplica

from .helpers import CANARY_CONFIG, STABLE_CONFIG, model_tree, pinned, plan_for

MODEL = "atlas-70b"
TRITON = {
    "kind": "triton",
    "model": MODEL,
    "versions": {"stable": 1, "canary": 3},
    "poll_interval": "10ms",
}


@pytest.fixture
def sim() -> Iterator[SimReplica]:
    """A Triton replica serving the stable build (version 1, max_seq_len 32,768)."""
    with SimReplica("c1", pool="canary", time_scale=1e-4) as started:
        yield started


@pytest.fixture
def sets(tmp_path: Path) -> tuple[PinnedSet, PinnedSet]:
    """The stable and canary sets of the plan (build-old, build-new)."""
    return pinned(tmp_path, "build-old", STABLE_CONFIG), pinned(
        tmp_path, "build-new", CANARY_CONFIG
    )


def executor_for(sim: SimReplica, **spec: object) -> tuple[TritonDeployer, Replica, Plan]:
    """The plan's triton executor and its one canary replica (the simulated one)."""
    plan = plan_for({**TRITON, **spec}, [sim.url])
    executor = build_executor(plan)
    assert isinstance(executor, TritonDeployer)
    return executor, plan.pools.canary.replicas[0], plan


def deployed(sim: SimReplica, pinned: PinnedSet) -> tuple[TritonDeployer, Replica]:
    """The executor and the replica once ``pinned`` was deployed to it (successfully)."""
    executor, replica, _ = executor_for(sim)
    assert executor.deploy(replica, pinned).ok
    return executor, replica


def index(sim: SimReplica) -> dict[str, str]:
    """Version -> state from the replica's repository index."""
    entries = httpx.post(f"{sim.url}/v2/repository/index", json={}).json()
    return {entry["version"]: entry["state"] for entry in entries}


def test_deploy_loads_the_pinned_config_and_version_then_verifies(
    sim: SimReplica, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The canary set goes in as version 3 with max_seq_len 8,192 and its digest reported."""
    stable, canary = sets
    executor, replica, _ = executor_for(sim)
    result = executor.deploy(replica, canary)
    assert (result.ok, result.changed) == (True, True), result.reason
    assert result.reason == "loaded build-new as atlas-70b version 3"
    assert (sim.config.max_seq_len, sim.config.version) == (8192, 3)
    assert sim.config.artefact_digest == canary.digest
    assert index(sim) == {"1": "UNAVAILABLE", "2": "UNAVAILABLE", "3": "READY"}
    verified = executor.verify(replica, canary, timeout=2)
    assert (verified.ok, verified.healthy, verified.digest_ok) == (True, True, True)
    # The other set is not what runs: every difference is named.
    wrong = executor.verify(replica, stable, timeout=2)
    assert (wrong.ok, wrong.healthy, wrong.digest_ok) == (False, True, False)
    assert f"digest {canary.digest[:12]}, pinned {stable.digest[:12]}" in wrong.reason
    assert "max_seq_len is 8192, pinned 32768" in wrong.reason
    assert "serves versions [3], pinned 1" in wrong.reason


def test_redeploying_the_running_set_is_a_no_op(
    sim: SimReplica, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """A resumed deploy of what already runs loads nothing (the engine instance is kept)."""
    _, canary = sets
    executor, replica = deployed(sim, canary)
    instance = sim.process
    again = executor.deploy(replica, canary)
    assert (again.ok, again.changed, again.reason) == (True, False, "already serving build-new")
    assert sim.process is instance


def test_rollback_restores_the_stable_config_and_version(
    sim: SimReplica, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """Canary then stable: the replica is back on version 1 at 32,768, verified."""
    stable, canary = sets
    executor, replica = deployed(sim, canary)
    back = executor.deploy(replica, stable)
    assert back.ok and back.changed, back.reason
    assert (sim.config.max_seq_len, sim.config.version) == (32768, 1)
    assert executor.verify(replica, stable, timeout=2).ok
    assert index(sim)["1"] == "READY"


def test_a_config_that_does_not_fit_fails_and_the_replica_stays_unhealthy(
    tmp_path: Path, sim: SimReplica
) -> None:
    """An OOM at load: the deploy fails with Triton's error; verification fails at its deadline."""
    oom = build_set(
        "build-new",
        model_tree(tmp_path / "oom", "oom"),
        "trtllm",
        {"max_seq_len": 8192, "kv_cache_free_gpu_mem_fraction": 0.3},
    )
    executor, replica, _ = executor_for(sim)
    result = executor.deploy(replica, oom)
    assert not result.ok
    assert "answered 400" in result.reason and "out of memory" in result.reason
    started = time.monotonic()
    verified = executor.verify(replica, oom, timeout=0.4)
    assert time.monotonic() - started < 1.5
    assert (verified.ok, verified.healthy) == (False, False)
    assert verified.reason == f"not healthy: GET {sim.url}/v2/health/ready answered 400"


def test_a_load_that_hangs_is_cut_off_at_the_timeout(
    tmp_path: Path, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """A load that would take 100 s fails after the 0.5 s budget, with the reason."""
    _, canary = sets
    with SimReplica("c1", time_scale=1e-4, load_delay_s=1e6) as slow:
        executor, replica, _ = executor_for(slow)
        started = time.monotonic()
        result = executor.deploy(replica, canary, timeout=0.5)
        took = time.monotonic() - started
    assert not result.ok
    assert result.reason == f"load of {MODEL} did not answer within 0.5 s"
    assert took < 2


def test_an_unreachable_replica_is_a_failed_deploy(sets: tuple[PinnedSet, PinnedSet]) -> None:
    """Nothing listens: ok False with the connection error, no exception."""
    _, canary = sets
    with SimReplica("c1", time_scale=1e-4) as gone:
        url = gone.url
    plan = plan_for(TRITON, [url])
    result = build_executor(plan).deploy(plan.pools.canary.replicas[0], canary, timeout=2)
    assert not result.ok and "ConnectError" in result.reason


def test_models_it_replaces_are_unloaded_only_when_loaded(
    sim: SimReplica, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """A replaced model that is not loaded is skipped; the deploy succeeds."""
    _, canary = sets
    executor, replica, _ = executor_for(sim, unload=["atlas-70b-msl32768"])
    result = executor.deploy(replica, canary)
    assert result.ok and result.detail["unloaded"] == []


def test_files_path_adds_a_check_of_the_files_on_the_replica(
    tmp_path: Path, sim: SimReplica, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The reported digest matches, but a changed engine file on the host fails verification."""
    _, canary = sets
    executor, replica, _ = executor_for(sim, files_path=str(tmp_path / "{set}"))
    assert executor.deploy(replica, canary).ok
    assert executor.verify(replica, canary, timeout=2).ok
    (tmp_path / "build-new" / "rank0.engine").write_bytes(b"rebuilt by hand")
    verified = executor.verify(replica, canary, timeout=2)
    assert (verified.healthy, verified.digest_ok) == (True, False)
    assert "rank0.engine: sha256" in verified.reason


def test_urls_naming_an_unknown_replica_are_bad_input(sim: SimReplica) -> None:
    """executor.urls must name replicas of the plan."""
    plan = plan_for({**TRITON, "urls": {"gpu-z": "http://10.0.0.9:8000"}}, [sim.url])
    with pytest.raises(BadInput, match=r"executor\.urls\.gpu-z: no replica named 'gpu-z'"):
        build_executor(plan)
