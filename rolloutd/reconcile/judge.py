"""Which gates a tick judges, and judging them.

Rollback triggers are judged every tick. A step gate is due ``interval`` after its last
judgement in the step, and a tick that comes up to :data:`JITTER` early of that still judges
it. Ticks run on a fixed grid but start a few milliseconds late or early (and a batch starts
its rollouts a few apart): comparing the interval with the last judgement's time exactly
would let a gate judged at t + 4 ms wait a whole trigger interval more at t + 30.001 s, and a
30 s schedule would silently become ~35 s. With the tolerance, the judgements of a 30 s gate
on a 10 s tick grid fall 30 s apart, every time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rolloutd.core.actions import GateResult, Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.drivers import Drivers
from rolloutd.errors import PermanentError
from rolloutd.evaluation.source import SuiteFedSource
from rolloutd.gates.base import Evaluation, Judging, MetricsSource, Role
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.gates.windows import bake_over, earlier_windows, final_window
from rolloutd.metrics.budget import Budgeted, Remembered
from rolloutd.reconcile.facts import Facts
from rolloutd.reconcile.suites import Suites

# How early of its due time a step gate is still judged: the scheduler's jitter, with room.
JITTER = timedelta(seconds=1)


def step_gate_due(plan: Plan, last: GateResult | None, now: datetime) -> bool:
    """Whether a step gate last judged as ``last`` (None: never in this step) is due."""
    if last is None:
        return True
    tolerance = min(JITTER, plan.interval / 10)
    return now - last.evaluated_at >= plan.interval - tolerance


def due_gates(facts: Facts, now: datetime) -> list[tuple[str, Role]]:
    """The gates to judge now: every trigger, and the step's gates that are due."""
    plan, progress = facts.plan, facts.progress
    if progress.started_at is None or progress.rollback is not None:
        return []
    due: list[tuple[str, Role]] = [(g, "trigger") for g in plan.rollback.triggers]
    at_step = facts.newest.at_step
    for gate in plan.gates_of(progress.step_index):
        if gate not in plan.rollback.triggers and step_gate_due(plan, at_step.get(gate), now):
            due.append((gate, "step"))
    return due


def evaluate(facts: Facts, drivers: Drivers, suites: Suites, now: datetime) -> list[Evaluation]:
    """Judge the due gates of one rollout: suite gates on their stored runs, the others on
    the rollout's metrics source (inconclusive, with the reason, when there is none)."""
    due = due_gates(facts, now)
    if not due:
        return []
    rollout_id, plan, progress = facts.rollout.id, facts.plan, facts.progress
    suite = [(g, r) for g, r in due if isinstance(plan.gates[g], SuiteGate)]
    due = [(g, r) for g, r in due if not isinstance(plan.gates[g], SuiteGate)]
    judged = [suites.judge(rollout_id, plan, progress, g, r, now) for g, r in suite]
    if not due:
        return judged
    try:
        source: MetricsSource | None = drivers.metrics(rollout_id, plan)
    except PermanentError as exc:
        reason = str(exc)
        source = None
    if source is None:
        return judged + [Evaluation(g, r, Verdict.INCONCLUSIVE, now, reason=reason) for g, r in due]
    source = Remembered(Budgeted(SuiteFedSource(source, facts.suite_counts), plan.trigger_interval))
    verified = {index: row.verified_at for index, row in facts.steps.items()}
    completed = {index: row.completed_at for index, row in facts.steps.items()}
    weight = plan.step_weight(progress.step_index)
    return judged + [
        evaluate_gate(
            plan.gates[gate],
            Judging(
                gate,
                role,
                source,
                now,
                plan,
                progress.step_verified_at,
                weight=weight,
                idle=plan.idle_pool(progress.step_index),
                # None but at the last step carrying the gate, in either role.
                final=final_window(plan, gate, progress, verified, now),
                bake_over=bake_over(plan, progress, now),
                earlier=earlier_windows(plan, gate, role, progress, verified, completed),
            ),
        )
        for gate, role in due
    ]
