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

import time
from collections.abc import Mapping
from datetime import datetime, timedelta

from rolloutd.core.actions import GateResult, Verdict
from rolloutd.core.machine import breaches
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.drivers import Drivers
from rolloutd.errors import PermanentError, RolloutdError
from rolloutd.evaluation.source import SuiteFedSource
from rolloutd.gates.base import Evaluation, Judging, MetricsSource, Role
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.gates.windows import bake_over, earlier_windows, final_window
from rolloutd.metrics.budget import Budgeted, Remembered
from rolloutd.reconcile.facts import Facts
from rolloutd.reconcile.shell import NotLeading
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
    """The gates to judge now: every trigger, and the step's gates that are due (none before
    the rollout started, once its rollback began, or once it ended)."""
    plan, progress = facts.plan, facts.progress
    if progress.started_at is None or progress.rollback is not None or progress.ended:
        return []
    due: list[tuple[str, Role]] = [(g, "trigger") for g in plan.rollback.triggers]
    at_step = facts.newest.at_step
    for gate in plan.gates_of(progress.step_index):
        if gate not in plan.rollback.triggers and step_gate_due(plan, at_step.get(gate), now):
            due.append((gate, "step"))
    return due


def of_batch(
    found: Mapping[int, Facts | RolloutdError], drivers: Drivers, suites: Suites, now: datetime
) -> dict[int, Judgement]:
    """The judgement of each rollout of a batch whose facts were read."""
    return {i: Judgement(f, drivers, suites, now) for i, f in found.items() if isinstance(f, Facts)}


class Judgement:
    """One rollout-tick's judging of its due gates, the rollback triggers first.

    A batch judges every rollout's triggers before it observes any rollout (:meth:`breached`),
    so that a breach goes to the router before the rest of its batch is observed; the rest of
    the due gates are judged in the rollout's turn (:meth:`evaluations`). Both share one
    metrics source, whose queries share the tick's budget and answer a repeated question once.
    """

    def __init__(self, facts: Facts, drivers: Drivers, suites: Suites, now: datetime) -> None:
        self.facts, self.drivers, self.suites, self.now = facts, drivers, suites, now
        self.due = due_gates(facts, now)
        self.spent = 0.0
        """Seconds spent judging the triggers ahead of the rollout's turn."""
        self._triggers: list[Evaluation] | None = None
        self._source: MetricsSource | str | None = None
        """The rollout's metrics source, made at its first query (a string: why it has none)."""

    def breached(self) -> bool:
        """Judge the due triggers now; whether one of them breached. A failure to judge them is
        left to the rollout's turn, which judges them again and reports it.

        :raises NotLeading: the lease was lost (a suite gate's job could not be written).
        """
        started = time.perf_counter()
        try:
            self._triggers = self._judge("trigger")
        except NotLeading:
            raise
        except RolloutdError:
            return False
        finally:
            self.spent = time.perf_counter() - started
        plan = self.facts.plan
        return any(breaches(plan, e.gate, e.verdict) for e in self._triggers)

    def evaluations(self) -> list[Evaluation]:
        """Every due gate's evaluation: the triggers (judged once), then the step's gates."""
        triggers = self._judge("trigger") if self._triggers is None else self._triggers
        return triggers + self._judge("step")

    def _judge(self, role: Role) -> list[Evaluation]:
        """Judge the due gates of ``role``: suite gates on their stored runs, the others on
        the rollout's metrics source (inconclusive, with the reason, when there is none)."""
        due = [(g, r) for g, r in self.due if r == role]
        if not due:
            return []
        facts, plan, progress, now = self.facts, self.facts.plan, self.facts.progress, self.now
        rollout_id = facts.rollout.id
        suite = [(g, r) for g, r in due if isinstance(plan.gates[g], SuiteGate)]
        due = [(g, r) for g, r in due if not isinstance(plan.gates[g], SuiteGate)]
        judged = [self.suites.judge(rollout_id, plan, progress, g, r, now) for g, r in suite]
        if not due:
            return judged
        source = self._metrics()
        if isinstance(source, str):
            return judged + [
                Evaluation(g, r, Verdict.INCONCLUSIVE, now, reason=source) for g, r in due
            ]
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

    def _metrics(self) -> MetricsSource | str:
        """The rollout's metrics source for this tick, or why it has none."""
        if self._source is None:
            facts, plan = self.facts, self.facts.plan
            try:
                found = self.drivers.metrics(facts.rollout.id, plan)
            except PermanentError as exc:
                self._source = str(exc)
                return self._source
            budget = plan.trigger_interval
            self._source = Remembered(Budgeted(SuiteFedSource(found, facts.suite_counts), budget))
        return self._source
