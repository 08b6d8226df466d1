"""Staging drills: exercise the forward deploy and the rollback before production may.

A drill deploys the canary set to every canary replica of a staging plan and verifies it,
then redeploys the stable set (the rollback path) and verifies that; it is recorded keyed
by the digests of both sets. A production rollout of the same (stable, canary) pair may
start only after a passed staging drill (:func:`drill_gate`); the caller decides about an
operator's ``--skip-drill``. Network work happens outside any transaction: the drill row is
written as ``running`` first and finished afterwards, so a crash leaves a drill that never
counts as passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rolloutd.core.plan import Plan
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import Clock, DeployResult, Executor, Verification
from rolloutd.deploy.catalog import find_set
from rolloutd.store import artefacts
from rolloutd.store.artefact_models import Drill
from rolloutd.store.writes import add_row

if TYPE_CHECKING:
    from rolloutd.store.types import Session

DRILL_ENVIRONMENT = "staging"


@dataclass(frozen=True)
class DrillStep:
    """One deploy or verification of the drill."""

    phase: str  # "forward" (canary set) or "rollback" (stable set)
    action: str  # "deploy" or "verify"
    replica: str
    set_name: str
    ok: bool
    reason: str
    started_s: float  # since the drill started
    duration_s: float
    result: dict[str, Any]


@dataclass(frozen=True)
class DrillOutcome:
    """The whole drill: passed only if every step passed."""

    passed: bool
    reason: str
    duration_s: float
    steps: tuple[DrillStep, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, stored as the drill's detail."""
        return {
            "passed": self.passed,
            "reason": self.reason,
            "duration_s": self.duration_s,
            "steps": [asdict(step) for step in self.steps],
        }


def run_drill(
    plan: Plan,
    stable: PinnedSet,
    canary: PinnedSet,
    executor: Executor,
    *,
    on_step: Callable[[DrillStep], None] | None = None,
    clock: Clock = time.monotonic,
) -> DrillOutcome:
    """Deploy and verify ``canary`` on every canary replica, then roll back to ``stable``.

    The rollback phase runs even when the forward phase failed, so staging is left on the
    stable set whenever it can be. Never raises for an operational failure.
    """
    started = clock()
    steps: list[DrillStep] = []
    replicas = plan.pools.canary.replicas

    def step(phase: str, action: str, outcome: DeployResult | Verification) -> bool:
        took = outcome.duration_s if isinstance(outcome, DeployResult) else outcome.waited_s
        done = DrillStep(
            phase=phase,
            action=action,
            replica=outcome.replica,
            set_name=outcome.set_name,
            ok=outcome.ok,
            reason=outcome.reason,
            started_s=max(0.0, clock() - started - took),
            duration_s=took,
            result=outcome.as_dict(),
        )
        steps.append(done)
        if on_step is not None:
            on_step(done)
        return done.ok

    def exercise(phase: str, pinned: PinnedSet) -> bool:
        for replica in replicas:
            if not step(phase, "deploy", executor.deploy(replica, pinned)):
                return False
            if not step(phase, "verify", executor.verify(replica, pinned)):
                return False
        return True

    forward = exercise("forward", canary)
    rollback = exercise("rollback", stable)
    failed = next((s for s in steps if not s.ok), None)
    if failed is None:
        reason = (
            f"{canary.name} deployed and verified on {len(replicas)} canary replica(s), "
            f"then rolled back to {stable.name} and verified"
        )
    else:
        reason = f"{failed.phase} {failed.action} on {failed.replica} failed: {failed.reason}"
    return DrillOutcome(
        passed=forward and rollback,
        reason=reason,
        duration_s=clock() - started,
        steps=tuple(steps),
    )


def start_drill(
    session: Session,
    plan: Plan,
    stable: PinnedSet,
    canary: PinnedSet,
    *,
    actor: str,
    now: datetime,
) -> int:
    """Record a drill as running; returns its id."""
    drill = Drill(
        plan_name=plan.name,
        service=plan.service,
        environment=plan.environment,
        stable_set=stable.name,
        canary_set=canary.name,
        stable_digest=stable.digest,
        canary_digest=canary.digest,
        result="running",
        actor=actor,
        started_at=now,
        finished_at=None,
        reason=None,
        detail={},
    )
    return add_row(session, drill).id


def finish_drill(
    session: Session, drill_id: int, outcome: DrillOutcome, *, executor: str, now: datetime
) -> None:
    """Record the drill's result and one deploy record per step."""
    drill = artefacts.drill_by_id(session, drill_id)
    drill.result = "passed" if outcome.passed else "failed"
    drill.finished_at = now
    drill.reason = outcome.reason
    drill.detail = outcome.as_dict()
    for step in outcome.steps:
        artefacts.record_deploy(
            session,
            step.result,
            executor=executor,
            step=f"{step.phase}-{step.action}",
            duration_s=step.duration_s,
            started_at=drill.started_at + timedelta(seconds=step.started_s),
            drill_id=drill_id,
        )


def latest_drill(session: Session, stable_digest: str, canary_digest: str) -> Drill | None:
    """The newest staging drill of this (stable, canary) pair, whatever its result."""
    return artefacts.latest_drill(session, stable_digest, canary_digest, DRILL_ENVIRONMENT)


def drill_passed(session: Session, stable_digest: str, canary_digest: str) -> bool:
    """Whether a staging drill of exactly this (stable, canary) pair has passed."""
    return artefacts.drill_passed(session, stable_digest, canary_digest, DRILL_ENVIRONMENT)


def drill_gate(session: Session, plan: Plan) -> str | None:
    """Why ``plan`` may not start for want of a drill, or None when it may.

    Only production rollouts need a passed staging drill of the same artefact pair. A set
    that is not pinned is reported by ``check_artefacts``; here it just closes the gate.
    """
    if plan.environment != "production":
        return None
    stable = find_set(session, plan.artefacts.stable)
    canary = find_set(session, plan.artefacts.canary)
    if stable is None or canary is None:
        return "the plan's artefact sets are not pinned, so no drill can have exercised them"
    if drill_passed(session, stable.digest, canary.digest):
        return None
    pair = f"{stable.name} ({stable.digest[:12]}) -> {canary.name} ({canary.digest[:12]})"
    last = latest_drill(session, stable.digest, canary.digest)
    seen = (
        "no staging drill has run"
        if last is None
        else f"the last staging drill (#{last.id}, {last.result}) did not pass: {last.reason}"
    )
    return (
        f"no passed staging drill for artefact sets {pair}: {seen}. Run: rolloutctl drill "
        "STAGING_PLAN --env staging, or start with --skip-drill --reason TEXT"
    )
