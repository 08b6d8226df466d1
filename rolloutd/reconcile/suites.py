"""When the tool-argument suite runs during a rollout, and how ticks judge its stored runs.

A run takes minutes against a real engine, so a tick never waits for one: a due run (at the
step's entry, then every ``every``) starts in a small background pool, and the tick after it
finishes judges it from the database.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import Literal

import structlog
from sqlalchemy.orm import Session, sessionmaker

from rolloutd.actions import Verdict
from rolloutd.analysis.base import Evaluation, MetricsSource, Role
from rolloutd.plan import Plan, SuiteGate
from rolloutd.progress import Progress
from rolloutd.store.db import transaction

log = structlog.get_logger("rolloutd.reconcile")


class Suites:
    """Starts due suite runs in the background and judges suite gates on stored runs."""

    def __init__(self, sessions: sessionmaker[Session], *, clock: Callable[[], datetime]) -> None:
        self.sessions = sessions
        self.clock = clock
        self._executor: ThreadPoolExecutor | None = None
        self._runs: dict[tuple[int, str], Future[None]] = {}

    def judge(
        self, rollout_id: int, plan: Plan, progress: Progress, gate: str, role: Role, now: datetime
    ) -> Evaluation:
        """Judge a suite gate on its stored runs; start a run when one is due."""
        from rolloutd.evaluation import records
        from rolloutd.evaluation.gate import suite_due
        from rolloutd.evaluation.schedule import judge_stored

        spec = plan.gates[gate]
        assert isinstance(spec, SuiteGate)
        step = progress.step_index
        with transaction(self.sessions) as session:
            ran_at = records.last_run_at(session, rollout_id=rollout_id, gate=gate, step_index=step)
            evaluation = judge_stored(
                session, spec=spec, name=gate, role=role, rollout_id=rollout_id, now=now
            )
        running = self._runs.get((rollout_id, gate))
        if running is not None and running.done():
            del self._runs[(rollout_id, gate)]
            running = None
        if running is None and suite_due(
            spec, last_run_at=ran_at, step_entered_at=progress.step_entered_at, now=now
        ):
            running = self._pool().submit(self._run, rollout_id, plan, spec, gate, role, step, now)
            self._runs[(rollout_id, gate)] = running
        if ran_at is None and spec.at_entry:
            # Judge this step on this step's run, not an earlier step's.
            reason = "the suite is running" if running is not None else "the suite has not run"
            return replace(
                evaluation,
                verdict=Verdict.PENDING,
                reason=f"{reason} in this step yet",
                evaluated_at=now,
            )
        return evaluation

    def _run(
        self,
        rollout_id: int,
        plan: Plan,
        spec: SuiteGate,
        gate: str,
        role: Role,
        step: int,
        now: datetime,
    ) -> None:
        from rolloutd.evaluation.runner import RunnerOptions
        from rolloutd.evaluation.schedule import run_suite_for_gate

        # The simulated fleet reads the expected call to know which answer to perturb.
        simulated = plan.metrics.source == "simulator"
        options = RunnerOptions(concurrency=spec.concurrency, send_expected=simulated)
        try:
            result = run_suite_for_gate(
                self.sessions,
                plan=plan,
                spec=spec,
                name=gate,
                role=role,
                rollout_id=rollout_id,
                step_index=step,
                now=now,
                options=options,
                clock=self.clock,
            )
            log.info("suite run", rollout=rollout_id, gate=gate, verdict=result.verdict.value)
        except Exception as exc:  # a background thread: report, never die silently
            log.error("suite run failed", rollout=rollout_id, gate=gate, error=str(exc))

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="suite")
        return self._executor

    def with_suite_counts(
        self, source: MetricsSource, rollout_id: int, progress: Progress
    ) -> MetricsSource:
        """The schema signals count the suite's tool calls beside the live ones."""
        from rolloutd.evaluation import records
        from rolloutd.evaluation.source import SuiteFedSource

        since = progress.step_entered_at

        def counts(pool: str) -> tuple[int, int, int | None]:
            role: Literal["canary", "baseline"] = "canary" if pool == "canary" else "baseline"
            with transaction(self.sessions) as session:
                return records.schema_counts(session, rollout_id=rollout_id, role=role, since=since)

        return SuiteFedSource(source, counts)

    def close(self) -> None:
        """Stop starting suite runs and drop the queued ones; a run in flight finishes in
        its thread (the daemon does not wait for it)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
