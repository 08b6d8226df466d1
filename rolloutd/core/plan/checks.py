"""The cross-field checks: problems that refuse a plan, and warnings that do not."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import timedelta

from rolloutd.core.plan.fleet import HAProxyRouterSpec
from rolloutd.core.plan.gates import CapacityGate, EventsGate
from rolloutd.core.plan.model import Plan
from rolloutd.core.plan.steps import CanaryStep, FullStep, PauseStep, ShadowStep, SteadyStep


def plan_warnings(
    plan: Plan, latency_edges: Mapping[str, tuple[str, Sequence[float]]] | None = None
) -> list[tuple[str, str]]:
    """Things that are legal but probably wrong: a target concurrency that cannot fit, step
    gates that cannot pass at their step's load (``rolloutd.core.loadmatch``), and compare
    gates too short to see their ``detect`` regression (``rolloutd.core.power``).
    ``latency_edges``: per latency signal, where its static bucket edges come from and the
    edges, when the plan's templates state them."""
    from rolloutd.core.loadmatch import load_warnings
    from rolloutd.core.power import power_warnings

    return [*_capacity_warnings(plan), *load_warnings(plan, latency_edges), *power_warnings(plan)]


def _capacity_warnings(plan: Plan) -> list[tuple[str, str]]:
    from rolloutd.core.capacity import (
        CapacityError,
        deployment_of,
        max_seq_len_for,
        resident_sequences,
    )

    capacity = plan.capacity
    if capacity is None or capacity.engine is None:
        return []
    replicas = len(plan.pools.canary.replicas)
    needed = math.ceil(capacity.target_concurrency * capacity.active_share)
    try:
        deployment = deployment_of(capacity.engine)
        per_replica = resident_sequences(deployment, capacity.max_seq_len)
        fits = max_seq_len_for(deployment, -(-needed // replicas))
    except CapacityError as exc:
        return [("capacity.engine", str(exc))]
    if per_replica * replicas >= needed:
        return []
    return [
        (
            "capacity",
            f"{capacity.target_concurrency} sessions x {capacity.active_share:g} active need "
            f"{needed} resident sequences, but {replicas} canary replica(s) hold "
            f"{per_replica * replicas} at max_seq_len {capacity.max_seq_len}; requests will "
            f"queue (max_seq_len {fits} would fit)",
        )
    ]


def plan_problems(plan: Plan) -> list[tuple[str, str]]:
    """Every broken cross-field rule of ``plan`` as (field path, what was expected)."""
    from rolloutd.core.power import detect_problems

    return [
        *_dangling_gate_references(plan),
        *_steps_out_of_order(plan),
        *_intervals(plan),
        *_metrics_source(plan),
        *_mirroring(plan),
        *_capacity(plan),
        *_gates_without_traffic(plan),
        *_step_min_samples(plan),
        *_production_executor(plan),
        *detect_problems(plan),
    ]


def _production_executor(plan: Plan) -> list[tuple[str, str]]:
    """A production rollback redeploys the stable set and verifies it: without an executor it
    moves traffic only and leaves the canary build on the canary replicas, which a plan must
    choose in words, not by leaving the section out."""
    executor = plan.executor
    if plan.environment != "production" or executor.kind != "none" or executor.reason:
        return []
    return [
        (
            "executor",
            "a production plan needs an executor (kind: command, triton or systemd) to "
            "redeploy and verify the stable set on rollback; to roll back traffic only, say why: "
            '{kind: none, reason: "..."}',
        )
    ]


def _step_min_samples(plan: Plan) -> list[tuple[str, str]]:
    """A step may ask for samples only from its own gates, of kinds that count samples, and
    only where it judges its gates at all (a pause step does not)."""
    problems = []
    for i, step in enumerate(plan.steps):
        if isinstance(step, PauseStep):
            for field in ("min_samples", "max_extension"):
                if getattr(step, field):
                    problems.append((f"steps[{i}].{field}", "a pause step judges no gates"))
            continue
        for name in step.min_samples:
            where = f"steps[{i}].min_samples.{name}"
            gate = plan.gates.get(name)
            if name not in step.gates:
                listed = ", ".join(step.gates) or "none"
                problems.append((where, f"{name!r} is not one of this step's gates ({listed})"))
            elif isinstance(gate, EventsGate):
                problems.append((where, f"gate {name!r} counts events, not samples"))
    return problems


def _gates_without_traffic(plan: Plan) -> list[tuple[str, str]]:
    """Step gates that need live requests from a pool that serves none at their step: they
    could never pass, so the step could never complete. (Triggers are fine: they are not
    judged where they do not apply.)"""
    problems = []
    for i, step in enumerate(plan.steps):
        idle = plan.idle_pool(i)
        for j, name in enumerate(step.gates):
            gate = plan.gates.get(name)
            if gate is None or idle not in gate.live_pools():
                continue
            why = (
                "the canary serves no live requests at 0% without mirroring (judge it there "
                "with a suite gate, or mirror traffic with the nginx or litellm driver)"
                if idle == "canary"
                else "stable serves no live requests at 100% to compare with"
            )
            problems.append((f"steps[{i}].gates[{j}]", f"gate {name!r} cannot apply here: {why}"))
    return problems


def _capacity(plan: Plan) -> list[tuple[str, str]]:
    if plan.capacity is not None:
        return []
    return [
        (f"gates.{name}", "a capacity gate needs the plan's 'capacity' section (max_seq_len)")
        for name, gate in plan.gates.items()
        if isinstance(gate, CapacityGate)
    ]


def _mirroring(plan: Plan) -> list[tuple[str, str]]:
    if not isinstance(plan.router, HAProxyRouterSpec):
        return []
    return [
        (
            f"steps[{i}].mirror",
            "HAProxy cannot mirror traffic: set 'mirror: false' (the shadow gates then exercise "
            "the canary directly, e.g. the tool-argument suite) or use the nginx or litellm "
            "driver",
        )
        for i, step in enumerate(plan.steps)
        if isinstance(step, ShadowStep) and step.mirror
    ]


def _metrics_source(plan: Plan) -> list[tuple[str, str]]:
    metrics = plan.metrics
    if metrics.source == "prometheus" and not metrics.url:
        return [
            ("metrics.url", "required when source is 'prometheus' (e.g. http://prometheus:9090)")
        ]
    if metrics.source == "prometheus" and not metrics.templates:
        return [
            (
                "metrics.templates",
                "required when source is 'prometheus': a template file name in gates/ "
                "(vllm, triton-trtllm) or a path to one",
            )
        ]
    if metrics.source == "file" and not metrics.path:
        return [("metrics.path", "required when source is 'file' (a JSON file of signal values)")]
    return []


def _dangling_gate_references(plan: Plan) -> list[tuple[str, str]]:
    defined = ", ".join(sorted(plan.gates)) or "none"
    problems = []
    for i, step in enumerate(plan.steps):
        for j, gate in enumerate(step.gates):
            if gate not in plan.gates:
                problems.append((f"steps[{i}].gates[{j}]", _undefined(gate, defined)))
    for j, gate in enumerate(plan.rollback.triggers):
        if gate not in plan.gates:
            problems.append((f"rollback.triggers[{j}]", _undefined(gate, defined)))
    return problems


def _undefined(gate: str, defined: str) -> str:
    return f"gate {gate!r} is not defined under 'gates' (defined: {defined})"


def _steps_out_of_order(plan: Plan) -> list[tuple[str, str]]:
    problems = []
    previous_weight = -1
    seen_full = False
    for i, step in enumerate(plan.steps):
        where = f"steps[{i}].kind"
        if seen_full and not isinstance(step, SteadyStep):
            problems.append((where, f"only 'steady' may follow 'full', got {step.kind!r}"))
            continue
        if isinstance(step, SteadyStep) and not seen_full:
            problems.append((where, "'steady' must come after a 'full' step"))
            continue
        if isinstance(step, PauseStep):
            if i == 0:
                problems.append((where, "a plan cannot start with 'pause'"))
            continue
        if isinstance(step, ShadowStep) and previous_weight > 0:
            problems.append((where, "'shadow' must come before any step that shifts traffic"))
        if isinstance(step, CanaryStep) and step.weight <= previous_weight:
            problems.append(
                (
                    f"steps[{i}].weight",
                    "weights must increase from step to step: "
                    f"{step.weight} after {previous_weight}",
                )
            )
        seen_full = seen_full or isinstance(step, FullStep)
        previous_weight = max(previous_weight, step.weight)
    return problems


def _intervals(plan: Plan) -> list[tuple[str, str]]:
    problems = []
    if plan.interval <= timedelta(0):
        problems.append(("interval", "must be longer than 0s"))
    if plan.trigger_interval <= timedelta(0):
        problems.append(("trigger_interval", "must be longer than 0s"))
    elif plan.trigger_interval > plan.interval:
        problems.append(("trigger_interval", "must not be longer than 'interval'"))
    return problems
