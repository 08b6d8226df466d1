"""The tick's side of suite gates: create a due run, and judge the gate on stored runs.

A run takes minutes against a real engine, so a tick never waits for one, nor drives one.
As Argo Rollouts' AnalysisRuns, a run is an object of its own: when a gate's suite is due (at
the step's entry, then every ``every``) the tick writes a *job* under a deterministic name
(``rollout-3/tool_args/step-0/run-1``, unique in the database, so neither two writers nor a
retried tick create it twice) and judges the gate from the runs stored so far. Claiming,
running, renewing, superseding and cancelling jobs is the evaluation reconciler's
(``rolloutd.reconcile.runs``), which the daemon schedules apart from the ticks.

The suite's schema-violation counts, which the live schema gates add to their own, are read
here with the tick's other reads (:func:`suite_counts`) and handed to the metrics source as
plain data.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.core.progress import Progress
from rolloutd.evaluation import records
from rolloutd.evaluation.gate import suite_due
from rolloutd.evaluation.schedule import judge_stored
from rolloutd.evaluation.source import SuiteCounts
from rolloutd.gates.base import Evaluation, Pool, Role
from rolloutd.reconcile.shell import Shell
from rolloutd.store import suite_jobs

if TYPE_CHECKING:
    from rolloutd.store.types import Session


def suite_counts(
    session: Session, rollout_id: int, plan: Plan, progress: Progress
) -> dict[Pool, SuiteCounts]:
    """The newest suite run's schema violations and calls of each pool in the step (canary
    runs for the canary, baseline runs for stable); none when the plan has no suite gate."""
    if not any(isinstance(gate, SuiteGate) for gate in plan.gates.values()):
        return {}
    since = progress.step_entered_at
    return {
        "canary": records.schema_counts(session, rollout_id=rollout_id, role="canary", since=since),
        "stable": records.schema_counts(
            session, rollout_id=rollout_id, role="baseline", since=since
        ),
    }


class Suites:
    """Writes due suite jobs and judges suite gates on their stored runs."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell

    def judge(
        self, rollout_id: int, plan: Plan, progress: Progress, gate: str, role: Role, now: datetime
    ) -> Evaluation:
        """Judge a suite gate on its stored runs; write its job when a run is due.

        :raises NotLeading: the lease was lost before the job was written.
        """
        spec = plan.gates[gate]
        assert isinstance(spec, SuiteGate)
        step = progress.step_index
        with self.shell.read() as session:
            # The open job first: a run stores its results before its job is done, so a job
            # seen ended here has its runs (or its failure) seen below. Read the other way
            # round, a run finishing in between (each statement sees the newest commits) left
            # neither an open job nor a run, and the suite ran again in the same step.
            job = suite_jobs.open_job(session, rollout_id=rollout_id, gate=gate)
            is_open = job is not None
            ran_at = records.last_run_at(session, rollout_id=rollout_id, gate=gate, step_index=step)
            done = suite_jobs.newest_ended(
                session, rollout_id=rollout_id, gate=gate, step_index=step, state="done"
            )
            failed = suite_jobs.newest_ended(
                session, rollout_id=rollout_id, gate=gate, step_index=step, state="failed"
            )
            evaluation = judge_stored(
                session, spec=spec, name=gate, role=role, rollout_id=rollout_id, now=now
            )
        done_at = None if done is None else done.finished_at
        failed_at = None if failed is None else failed.finished_at
        last = max((t for t in (ran_at, done_at, failed_at) if t is not None), default=None)
        if not is_open and suite_due(
            spec, last_run_at=last, step_entered_at=progress.step_entered_at, now=now
        ):
            with self.shell.write(self.shell.held()) as session:
                # None: another writer's job came first; either way one is open now.
                suite_jobs.write_due(
                    session, rollout_id=rollout_id, gate=gate, step_index=step, due_at=now
                )
            is_open = True
        if ran_at is None and spec.at_entry:
            # Judge this step on this step's run, not an earlier step's.
            if done_at is not None and (failed_at is None or done_at >= failed_at):
                # The step's run ended without storing a run: say why, never "pending".
                if evaluation.verdict is not Verdict.PENDING:
                    return evaluation  # e.g. a live sample too small, with the counts
                why = "" if done is None else f": {done.reason}"
                reason = f"the suite's run for this step stored no runs{why}"
                return replace(evaluation, verdict=Verdict.INCONCLUSIVE, reason=reason)
            reason = (
                "the suite's run for this step has not finished yet"
                if is_open
                else "the suite has not run in this step yet"
            )
            if failed_at is not None:
                reason = "the suite's run for this step failed; it runs again when due"
            return replace(evaluation, verdict=Verdict.PENDING, reason=reason, evaluated_at=now)
        return evaluation
