"""Rollout plans: what an operator writes down before a rollout may start.

A plan is frozen data. It names the service and environment, the two engine pools
and how the router reaches them, where metrics come from, the pinned artefact sets,
the ordered steps with their gates, the rollback triggers evaluated at every step,
and the limits. Loading and the error messages live in ``rolloutd.planfile``; this
module holds only the shape and the rules that tie fields together.
"""

from __future__ import annotations

from rolloutd.core.plan.alerts import AlertChannel, AlertRoute, Alerts, AlertSeverity, AlertTopic
from rolloutd.core.plan.base import Duration, Fraction, Name
from rolloutd.core.plan.checks import plan_problems, plan_warnings
from rolloutd.core.plan.executors import (
    TEMPLATE_FIELDS,
    CommandExecutor,
    ExecutorSpec,
    NoExecutor,
    Role,
    TritonExecutor,
)
from rolloutd.core.plan.fleet import (
    Artefacts,
    Capacity,
    EngineShape,
    FileRouterSpec,
    HAProxyRouterSpec,
    MemoryRouterSpec,
    MetricsSpec,
    NginxRouterSpec,
    Pool,
    Pools,
    Replica,
    RouterSpec,
)
from rolloutd.core.plan.gates import (
    DEFAULT_MIN_LOAD_RATIO,
    ONCE_PER_SESSION,
    QUEUE_TIMEOUT_SIGNALS,
    CapacityGate,
    CompareGate,
    Detect,
    EventsGate,
    GateSpec,
    JudgeSpec,
    LatencyGate,
    NoData,
    RollbackAfter,
    SampledSource,
    SuiteGate,
    ThresholdGate,
    planned_load_ratio,
)
from rolloutd.core.plan.model import Limits, Plan, Rollback, Traffic
from rolloutd.core.plan.steps import CanaryStep, FullStep, PauseStep, ShadowStep, SteadyStep, Step

__all__ = [
    "DEFAULT_MIN_LOAD_RATIO",
    "ONCE_PER_SESSION",
    "QUEUE_TIMEOUT_SIGNALS",
    "TEMPLATE_FIELDS",
    "AlertChannel",
    "AlertRoute",
    "AlertSeverity",
    "AlertTopic",
    "Alerts",
    "Artefacts",
    "CanaryStep",
    "Capacity",
    "CapacityGate",
    "CommandExecutor",
    "CompareGate",
    "Detect",
    "Duration",
    "EngineShape",
    "EventsGate",
    "ExecutorSpec",
    "FileRouterSpec",
    "Fraction",
    "FullStep",
    "GateSpec",
    "HAProxyRouterSpec",
    "JudgeSpec",
    "LatencyGate",
    "Limits",
    "MemoryRouterSpec",
    "MetricsSpec",
    "Name",
    "NginxRouterSpec",
    "NoData",
    "NoExecutor",
    "PauseStep",
    "Plan",
    "Pool",
    "Pools",
    "Replica",
    "Role",
    "Rollback",
    "RollbackAfter",
    "RouterSpec",
    "SampledSource",
    "ShadowStep",
    "SteadyStep",
    "Step",
    "SuiteGate",
    "ThresholdGate",
    "Traffic",
    "TritonExecutor",
    "plan_problems",
    "plan_warnings",
    "planned_load_ratio",
]
