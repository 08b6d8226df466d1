"""Staging drills: the deploy-and-rollback exercise, its record, and the production gate."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.catalog import build_set, pin
from rolloutd.deploy.drills import (
    DrillStep,
    drill_gate,
    drill_passed,
    finish_drill,
    run_drill,
    start_drill,
)
from rolloutd.deploy.executors import build_executor
from rolloutd.sim.engine import Replica as SimReplica
from rolloutd.store import queries
from rolloutd.store.artefact_models import DeployRecord, Drill

from .helpers import CANARY_CONFIG, STABLE_CONFIG, model_tree, pinned, plan_for

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TRITON = {"kind": "triton", "model": "atlas-70b", "versions": {"stable": 1, "canary": 3}}


@pytest.fixture
def fleet() -> Iterator[list[SimReplica]]:
    """Two simulated Triton canary replicas on the stable build."""
    with SimReplica("c1", time_scale=1e-4) as one, SimReplica("c2", time_scale=1e-4) as two:
        yield [one, two]


@pytest.fixture
def sets(session: Session, tmp_path: Path) -> tuple[PinnedSet, PinnedSet]:
    """The stable and canary sets, pinned."""
    stable = pinned(tmp_path, "build-old", STABLE_CONFIG)
    canary = pinned(tmp_path, "build-new", CANARY_CONFIG)
    pin(session, stable, now=NOW)
    pin(session, canary, now=NOW)
    return stable, canary


def drill(
    session: Session, fleet: list[SimReplica] | list[str], stable: PinnedSet, canary: PinnedSet
) -> tuple[int, list[DrillStep], bool]:
    """Run and record a staging drill of (stable, canary) on ``fleet`` (replicas or URLs)."""
    urls = [r if isinstance(r, str) else r.url for r in fleet]
    plan = plan_for({**TRITON, "poll_interval": "10ms", "health_deadline": "1s"}, urls)
    drill_id = start_drill(session, plan, stable, canary, actor="ana", now=NOW)
    assert not drill_passed(session, stable.digest, canary.digest)  # running is not passed
    steps: list[DrillStep] = []
    outcome = run_drill(plan, stable, canary, build_executor(plan), on_step=steps.append)
    finish_drill(session, drill_id, outcome, executor="triton", now=NOW)
    return drill_id, steps, outcome.passed


def test_a_drill_deploys_canary_then_rolls_back_on_every_replica(
    session: Session, fleet: list[SimReplica], sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """Forward then rollback, deploy and verify per replica; staging ends on stable."""
    stable, canary = sets
    drill_id, steps, passed = drill(session, fleet, stable, canary)
    assert passed
    assert [(s.phase, s.action, s.replica, s.set_name) for s in steps] == [
        ("forward", "deploy", "c1", "build-new"),
        ("forward", "verify", "c1", "build-new"),
        ("forward", "deploy", "c2", "build-new"),
        ("forward", "verify", "c2", "build-new"),
        ("rollback", "deploy", "c1", "build-old"),
        ("rollback", "verify", "c1", "build-old"),
        ("rollback", "deploy", "c2", "build-old"),
        ("rollback", "verify", "c2", "build-old"),
    ]
    assert all(r.config.max_seq_len == 32768 and r.config.version == 1 for r in fleet)
    row = session.get_one(Drill, drill_id)
    assert (row.result, row.stable_digest, row.canary_digest) == (
        "passed",
        stable.digest,
        canary.digest,
    )
    assert len(row.detail["steps"]) == 8
    records = list(
        session.scalars(
            select(DeployRecord).where(DeployRecord.drill_id == drill_id).order_by(DeployRecord.id)
        )
    )
    starts = [r.started_at for r in records]
    assert starts == sorted(starts) and starts[0] >= row.started_at
    assert {r.step for r in records} == {
        "forward-deploy",
        "forward-verify",
        "rollback-deploy",
        "rollback-verify",
    }
    assert drill_passed(session, stable.digest, canary.digest)


def test_a_failed_forward_deploy_still_rolls_back_and_fails_the_drill(
    session: Session, fleet: list[SimReplica], sets: tuple[PinnedSet, PinnedSet], tmp_path: Path
) -> None:
    """A canary that cannot load: the drill fails, staging is put back on stable."""
    stable, _ = sets
    broken = build_set(
        "build-new",
        model_tree(tmp_path / "oom", "oom"),
        "trtllm",
        {"max_seq_len": 8192, "kv_cache_free_gpu_mem_fraction": 0.3},
    )
    drill_id, steps, passed = drill(session, fleet, stable, broken)
    assert not passed
    assert (steps[0].phase, steps[0].action, steps[0].ok) == ("forward", "deploy", False)
    assert [(s.phase, s.ok) for s in steps[1:]] == [("rollback", True)] * 4
    assert all(r.config.max_seq_len == 32768 for r in fleet)
    row = session.get_one(Drill, drill_id)
    assert row.result == "failed"
    assert row.reason is not None and row.reason.startswith("forward deploy on c1 failed:")
    assert not drill_passed(session, stable.digest, broken.digest)


def test_production_needs_a_passed_drill_of_exactly_the_same_pair(
    session: Session, fleet: list[SimReplica], sets: tuple[PinnedSet, PinnedSet], tmp_path: Path
) -> None:
    """Closed before the drill, open after it; another canary digest closes it again."""
    stable, canary = sets
    production = plan_for(TRITON, ["http://10.0.0.4:8000"], environment="production")
    closed = drill_gate(session, production)
    assert closed is not None and "no staging drill has run" in closed
    assert "rolloutctl drill STAGING_PLAN --env staging" in closed
    assert drill_gate(session, plan_for(TRITON, ["http://10.0.0.4:8000"])) is None  # staging
    drill(session, fleet, stable, canary)
    assert drill_gate(session, production) is None

    rebuilt = pinned(tmp_path / "v2", "build-newer", {**CANARY_CONFIG, "max_seq_len": 4096})
    pin(session, rebuilt, now=NOW)
    other = plan_for(
        TRITON, ["http://10.0.0.4:8000"], environment="production", canary=rebuilt.name
    )
    assert drill_gate(session, other) is not None


def test_a_failed_drill_is_named_when_the_gate_stays_closed(
    session: Session, fleet: list[SimReplica], sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The refusal says which drill failed and why."""
    stable, canary = sets
    url = fleet[1].url
    fleet[1].stop()
    drill_id, _, passed = drill(session, [fleet[0].url, url], stable, canary)
    assert not passed
    production = plan_for(TRITON, ["http://10.0.0.4:8000"], environment="production")
    message = drill_gate(session, production)
    assert message is not None and f"the last staging drill (#{drill_id}, failed)" in message


def test_deploy_records_keep_what_the_executor_did(
    session: Session, fleet: list[SimReplica], sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The store keeps the result of one deploy for a rollout's audit trail."""
    _, canary = sets
    plan = plan_for(TRITON, [fleet[0].url])
    result = build_executor(plan).deploy(plan.pools.canary.replicas[0], canary)
    record_id = queries.record_deploy(
        session,
        result.as_dict(),
        executor=result.executor,
        step="deploy",
        duration_s=result.duration_s,
        started_at=NOW,
    )
    row = session.get_one(DeployRecord, record_id)
    assert (row.replica, row.set_digest, row.ok, row.executor) == (
        "c1",
        canary.digest,
        True,
        "triton",
    )
    assert row.detail["reason"] == result.reason
