"""What a plan's weights and replica counts let its load-matched gates judge, said up front.

A latency gate (or a compare gate on queue timeouts) may not pass while one canary replica
carries less than ``min_load_ratio`` of one stable replica's load: at 5% of sessions on one
canary beside three stable replicas it carries 0.16 of it, so a gate on that step stays
*pending* and the step cannot complete on it. ``plan validate`` says so before the rollout
starts, names the first step that can judge the gate, and says how finely the gate's
histogram can tell latencies apart at its target (when the plan's templates state the
bucket edges; otherwise the rule the edges must follow).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rolloutd.core.plan import CompareGate, LatencyGate, Plan, planned_load_ratio

BucketEdges = tuple[str, Sequence[float]]
"""Where a latency signal's bucket edges come from (for the message), and the edges."""


def load_warnings(
    plan: Plan, edges: Mapping[str, BucketEdges] | None = None
) -> list[tuple[str, str]]:
    """Step gates that cannot pass at their step's planned load, as (field path, message)."""
    canaries, stables = len(plan.pools.canary.replicas), len(plan.pools.stable.replicas)
    found = []
    for i, step in enumerate(plan.steps):
        weight = plan.step_weight(i)
        if not 0 < weight < 100:
            continue  # shadow: no live load to match; 100%: the canary carries all of it
        ratio = planned_load_ratio(weight, canaries, stables)
        for j, name in enumerate(step.gates):
            gate = plan.gates.get(name)
            if not isinstance(gate, LatencyGate | CompareGate) or ratio >= gate.load_floor():
                continue
            message = (
                f"gate {name!r} cannot pass at {weight}%: a canary replica carries {ratio:.2f} "
                f"of a stable replica's load ({canaries} canary, {stables} stable), under its "
                f"min_load_ratio {gate.load_floor():g}, so its pass is pending (canary "
                "underloaded) and the step cannot complete on it; a failure still counts. "
                f"{_judged_at(plan, name, gate.load_floor(), i)}: move the gate there (and to "
                f"rollback.triggers, to fail a canary slower even at {weight}%), or set "
                "min_load_ratio: 0"
            )
            if isinstance(gate, LatencyGate):
                message += f". {resolution(gate, (edges or {}).get(gate.signal))}"
            found.append((f"steps[{i}].gates[{j}]", message))
    return found


def _judged_at(plan: Plan, name: str, floor: float, after: int) -> str:
    """Which later step, carrying the gate or with it as a trigger, reaches the load."""
    canaries, stables = len(plan.pools.canary.replicas), len(plan.pools.stable.replicas)
    for k in range(after + 1, len(plan.steps)):
        step = plan.steps[k]
        if name not in step.gates and name not in plan.rollback.triggers:
            continue
        weight = plan.step_weight(k)
        where = f"steps[{k}] ({step.title()})"
        if weight == 100:
            return f"{where} judges it with all the load on the canary"
        ratio = planned_load_ratio(weight, canaries, stables) if weight else 0.0
        if ratio >= floor:
            return f"{where} is the first step to judge it, at load ratio {ratio:.2f}"
    return "No later step carrying it reaches that load before 100%"


def resolution(gate: LatencyGate, known: BucketEdges | None) -> str:
    """How finely the gate's histogram tells p95s apart at its target, or the rule when the
    bucket edges are not known here."""
    target = gate.target_seconds
    if known is None:
        return (
            f"The bucket edges of {gate.signal} are not stated where validation can see them: "
            f"the gate decides at edges, so it needs one at or above the {target:g}s target, "
            "at most 25% above it (gates/README.md)"
        )
    where, bounds = known
    at_or_above = [b for b in bounds if b >= target]
    if not at_or_above:
        return (
            f"{where.capitalize()} stop at {max(bounds):g}s, below the {target:g}s target: "
            "the gate can never show the canary slower than it"
        )
    if not any(b > target for b in bounds):
        # A p95 past the last finite edge is a measurement error (the histogram cannot tell
        # how far past it lies), so a target on that edge is never shown exceeded.
        return (
            f"{where.capitalize()} stop at the {target:g}s target: a p95 above it lies past "
            "the last edge, which reads as a measurement error, so the gate can never show "
            "the canary slower than it"
        )
    lower = max((b for b in bounds if b <= target), default=0.0)
    upper = min(b for b in bounds if b > target)
    text = (
        f"At its {target:g}s target {where} have edges at {lower:g}s and {upper:g}s: p95s "
        f"are told apart there in steps of {upper - lower:g}s ({(upper - lower) / target:.0%})"
    )
    if at_or_above[0] > target:
        text += (
            f", and a p95 under {at_or_above[0]:g}s "
            f"(+{at_or_above[0] / target - 1:.0%}) is never shown slower than the target"
        )
    return text
