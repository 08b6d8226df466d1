"""The plan itself: its sections, limits and rollback triggers."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field

from rolloutd.core.outline import PlanOutline, StepOutline
from rolloutd.core.plan.alerts import Alerts
from rolloutd.core.plan.base import Duration, Name, _Spec
from rolloutd.core.plan.executors import ExecutorSpec, NoExecutor
from rolloutd.core.plan.fleet import Artefacts, Capacity, MetricsSpec, Pools, RouterSpec
from rolloutd.core.plan.gates import GateSpec
from rolloutd.core.plan.steps import PauseStep, ShadowStep, Step
from rolloutd.core.progress import step_number


class Limits(_Spec):
    """When to stop trusting a rollout that makes no progress. ``on_inconclusive`` is the
    ``on_no_data`` of every gate that does not name its own (pause: ``hold``)."""

    max_inconclusive: int = Field(default=5, ge=1)
    on_inconclusive: Literal["pause", "rollback"] = "pause"
    progress_deadline: Duration | None = None


class Traffic(_Spec):
    """The live traffic the plan expects (at the busiest hour it will not wait for): with a
    compare gate's ``detect``, ``plan validate`` says whether the gate's steps last long
    enough to see that regression (``rolloutd.core.power``)."""

    sessions_per_minute: float = Field(gt=0.0)
    requests_per_session: float = Field(default=1.0, ge=1.0)
    """Exposure per session of a request-level signal (requests, or tool calls for a
    schema-violation rate); once-per-session signals count sessions."""


class Rollback(_Spec):
    """Gates evaluated at every tick of every step; any breach rolls back at once."""

    triggers: list[Name] = Field(default_factory=list)


class Plan(_Spec):
    """A whole rollout plan. Structure only: :func:`plan_problems` checks how fields relate."""

    name: Name
    service: Name
    environment: Literal["staging", "production"]
    description: str = ""
    pools: Pools
    router: RouterSpec
    metrics: MetricsSpec
    artefacts: Artefacts
    capacity: Capacity | None = None
    traffic: Traffic | None = None
    interval: Duration = timedelta(seconds=30)
    trigger_interval: Duration = timedelta(seconds=5)
    limits: Limits = Limits()
    gates: dict[Name, GateSpec] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1)
    rollback: Rollback = Rollback()
    alerts: Alerts | None = None
    executor: ExecutorSpec = NoExecutor()

    def outline(self) -> PlanOutline:
        """What the views show of this plan (:mod:`rolloutd.core.outline`)."""
        steps = tuple(
            StepOutline(
                kind=step.kind,
                title=step.title(),
                weight=self.step_weight(index),
                hold_seconds=step.hold_for().total_seconds(),
                awaits_promotion=step.awaits_promotion(),
                gates=self.gates_of(index),
            )
            for index, step in enumerate(self.steps)
        )
        return PlanOutline(steps, tuple(self.rollback.triggers), tuple(self.gates))

    @property
    def waits_on_network(self) -> bool:
        """Whether a tick of this plan may wait on the network: its router, metrics source
        or executor is reached over it. A file and a memory twin never are."""
        local = ("file", "memory")
        return (
            self.router.driver not in local
            or self.metrics.source not in local
            or self.executor.kind != "none"
        )

    def step_weight(self, index: int) -> int:
        """The canary weight in force at step ``index`` (a pause keeps the one before it)."""
        for step in reversed(self.steps[: index + 1]):
            if not isinstance(step, PauseStep):
                return step.weight
        return 0

    def step_mirrors(self, index: int) -> bool:
        """Whether traffic is mirrored at step ``index`` (a pause after shadow keeps mirroring)."""
        for step in reversed(self.steps[: index + 1]):
            if not isinstance(step, PauseStep):
                return isinstance(step, ShadowStep) and step.mirror
        return False

    def idle_pool(self, index: int) -> Literal["canary", "stable"] | None:
        """The pool that serves no live requests at step ``index``: the canary at 0% without
        mirroring, stable at 100%; a gate that needs that pool's traffic cannot apply there."""
        weight = self.step_weight(index)
        if weight == 0 and not self.step_mirrors(index):
            return "canary"
        return "stable" if weight == 100 else None

    def step_named(self, index: int) -> str:
        """Step ``index`` as people read it: ``step 2 of 6 (canary 5%)``."""
        return f"{step_number(index, len(self.steps))} ({self.steps[index].title()})"

    def gates_of(self, index: int) -> tuple[str, ...]:
        """The gate names that must pass for step ``index`` to complete."""
        return tuple(self.steps[index].gates)

    def decides_a_step(self, gate: str) -> bool:
        """Whether some step must pass ``gate`` to complete (a trigger may do both)."""
        return any(gate in step.gates for step in self.steps)
