"""When the tool-argument suite runs during a rollout, and how ticks judge its stored runs.

A run takes minutes against a real engine, so a tick never waits for one. When a gate's suite
is due (at the step's entry, then every ``every``) the tick writes a *job* -- the fact that
this run should happen -- and the leader claims it and runs it in a small background pool; the
tick after it finishes judges it from the database.

A job is held like a lease (``rolloutd.store.suite_jobs``): the holder's claim runs until
``acquired_until``, which it moves forward every :attr:`Suites.renew_every` under the leader
lease, and a request to an engine starts only while the claim outlives the request's own
timeout plus the margin. So once a claim has lapsed no request of its holder is still in
flight, and another instance may claim the job: a new leader restarts an orphaned run, once
(the claim is one conditional UPDATE). Every write of a run checks its claim and the lease.
On SIGTERM the runs are stopped (their requests abandoned within a tenth of a second) and
their claims released, so the next leader restarts them at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from rolloutd.analysis.base import Evaluation, MetricsSource, Role
from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.core.progress import Progress
from rolloutd.errors import RolloutdError
from rolloutd.reconcile.shell import NotLeading, Shell
from rolloutd.store import suite_jobs
from rolloutd.store.suite_jobs import Claim

if TYPE_CHECKING:
    from rolloutd.evaluation.runner import RunnerOptions

log = structlog.get_logger("rolloutd.reconcile")

# Runs at once; a job waits, unclaimed, for a free worker.
WORKERS = 2
RENEW_AT_MOST_EVERY = timedelta(seconds=5)
# A job that failed this many claims in a row (a crash, a database error) is given up.
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class _Job:
    """What a tick read of a gate's open job."""

    id: int
    step_index: int
    attempts: int
    acquired_until: datetime | None
    reason: str | None


@dataclass
class _Control:
    """One claim's run: the job's fence and its stop switch (a ``RunControl``)."""

    suites: Suites
    claim: Claim
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def job_id(self) -> int | None:
        return self.claim.job_id

    @property
    def renew_every(self) -> float:
        return self.suites.renew_every.total_seconds()

    def permit(self, timeout_s: float) -> bool:
        shell = self.suites.shell
        outlive = timedelta(seconds=timeout_s) + shell.margin
        return not self.stop.is_set() and shell.wall() + outlive < self.claim.until

    def stopped(self) -> bool:
        return self.stop.is_set()

    def renew(self) -> None:
        shell = self.suites.shell
        try:
            with shell.write(shell.held()) as session:
                until = shell.wall() + self.suites.hold_for(self.timeout_s)
                renewed = suite_jobs.extend(session, self.claim, until=until)
        except NotLeading:
            renewed = None
        except (RolloutdError, SQLAlchemyError) as exc:
            # The claim still runs to its expiry, and permit() stops new requests before it.
            log.warning("could not renew a suite job", job=self.claim.job_id, error=str(exc))
            return
        if renewed is None:
            log.warning("lost a suite job; stopping its run", job=self.claim.job_id)
            self.stop.set()
        else:
            self.claim = renewed

    @contextmanager
    def write(self) -> Iterator[Session]:
        shell = self.suites.shell
        with shell.write(shell.held()) as session:
            if not suite_jobs.holds(session, self.claim):
                raise NotLeading(f"suite job {self.claim.job_id} is no longer ours")
            yield session

    timeout_s: float = 60.0


@dataclass(frozen=True)
class _Gate:
    """One suite gate of one rollout, judged in one role."""

    rollout_id: int
    plan: Plan
    spec: SuiteGate
    name: str
    role: Role


@dataclass
class _Run:
    future: Future[None]
    control: _Control


class Suites:
    """Writes due suite jobs, runs the ones this leader claims, and judges suite gates on
    stored runs."""

    def __init__(
        self, shell: Shell, *, lease_ttl: Callable[[], timedelta] = lambda: timedelta(seconds=15)
    ) -> None:
        self.shell = shell
        self.lease_ttl = lease_ttl
        self._executor: ThreadPoolExecutor | None = None
        self._runs: dict[int, _Run] = {}  # job id -> this process's run of it
        self._lock = threading.Lock()
        self._closing = False

    @property
    def renew_every(self) -> timedelta:
        """How often a run renews its claim: a third of the lease TTL, at most 5 s."""
        return min(RENEW_AT_MOST_EVERY, self.lease_ttl() / 3)

    def hold_for(self, timeout_s: float) -> timedelta:
        """How far a claim reaches: a request's timeout and the margin, plus two renewal
        periods, so that between renewals a request may still start."""
        return timedelta(seconds=timeout_s) + self.shell.margin + 2 * self.renew_every

    def judge(
        self, rollout_id: int, plan: Plan, progress: Progress, gate: str, role: Role, now: datetime
    ) -> Evaluation:
        """Judge a suite gate on its stored runs; write, claim and start a due run."""
        from rolloutd.evaluation import records
        from rolloutd.evaluation.schedule import judge_stored

        spec = plan.gates[gate]
        assert isinstance(spec, SuiteGate)
        step = progress.step_index
        with self.shell.read() as session:
            # The open job first: a run stores its results before its job is done, so a job
            # seen ended here has its runs (or its failure) seen below. Read the other way
            # round, a run finishing in between (each statement sees the newest commits) left
            # neither an open job nor a run, and the suite ran again in the same step.
            row = suite_jobs.open_job(session, rollout_id=rollout_id, gate=gate)
            ran_at = records.last_run_at(session, rollout_id=rollout_id, gate=gate, step_index=step)
            failed_at = suite_jobs.last_ended_at(
                session, rollout_id=rollout_id, gate=gate, step_index=step, state="failed"
            )
            evaluation = judge_stored(
                session, spec=spec, name=gate, role=role, rollout_id=rollout_id, now=now
            )
            job = (
                None
                if row is None
                else _Job(row.id, row.step_index, row.attempts, row.acquired_until, row.reason)
            )
        last = max((t for t in (ran_at, failed_at) if t is not None), default=None)
        job = self._drive(_Gate(rollout_id, plan, spec, gate, role), progress, job, last, now)
        if ran_at is None and spec.at_entry:
            # Judge this step on this step's run, not an earlier step's.
            reason = (
                "the suite's run for this step has not finished yet"
                if job is not None
                else "the suite has not run in this step yet"
            )
            if failed_at is not None:
                reason = "the suite's run for this step failed; it runs again when due"
            return replace(evaluation, verdict=Verdict.PENDING, reason=reason, evaluated_at=now)
        return evaluation

    def _drive(
        self,
        gate: _Gate,
        progress: Progress,
        job: _Job | None,
        last_run_at: datetime | None,
        now: datetime,
    ) -> _Job | None:
        """Bring the gate's job where it should be: superseded when its step is over, written
        when a run is due, claimed and started when it is free. Returns the open job."""
        from rolloutd.evaluation.gate import suite_due

        shell = self.shell
        rollout_id = gate.rollout_id
        step = progress.step_index
        held = shell.held()
        if job is not None and job.step_index != step:
            with shell.write(held) as session:
                reason = f"{gate.plan.step_named(step)} began before the run finished"
                suite_jobs.end_job(session, job.id, state="superseded", now=now, reason=reason)
            self._stop(job.id)
            job = None
        if job is None:
            if self._closing or not suite_due(
                gate.spec,
                last_run_at=last_run_at,
                step_entered_at=progress.step_entered_at,
                now=now,
            ):
                return None
            with shell.write(held) as session:
                row = suite_jobs.add_job(
                    session, rollout_id=rollout_id, gate=gate.name, step_index=step, due_at=now
                )
                job = _Job(row.id, step, 0, None, None)
        with self._lock:
            run = self._runs.get(job.id)
            if run is not None and not run.future.done():
                return job
            self._runs.pop(job.id, None)
            busy = sum(not r.future.done() for r in self._runs.values())
        wall = shell.wall()
        if self._closing or busy >= WORKERS:
            return job
        if job.acquired_until is not None and job.acquired_until > wall:
            return job  # another instance's claim (or a stopped run's) has not lapsed
        if job.attempts >= MAX_ATTEMPTS:
            with shell.write(held) as session:
                reason = f"given up after {job.attempts} attempts (last: {job.reason})"
                suite_jobs.end_job(session, job.id, state="failed", now=now, reason=reason)
            log.error("suite job failed", rollout=rollout_id, gate=gate.name, reason=reason)
            return None
        options = _options(gate.plan, gate.spec, shell.instance)
        with shell.write(held) as session:
            claim = suite_jobs.claim(
                session,
                job.id,
                attempts=job.attempts,
                holder=held.holder,
                until=wall + self.hold_for(options.timeout_s),
                now=wall,
            )
        if claim is None:
            return job
        control = _Control(self, claim, timeout_s=options.timeout_s)
        future = self._pool().submit(self._run, gate, step, now, options, control)
        with self._lock:
            self._runs[job.id] = _Run(future, control)
        return job

    def _run(
        self, gate: _Gate, step: int, now: datetime, options: RunnerOptions, control: _Control
    ) -> None:
        from rolloutd.evaluation.runner import RunAbandoned
        from rolloutd.evaluation.schedule import run_suite_for_gate

        shell = self.shell
        bound = log.bind(rollout=gate.rollout_id, gate=gate.name, job=control.claim.job_id)
        try:
            result = run_suite_for_gate(
                shell.sessions,
                plan=gate.plan,
                spec=gate.spec,
                name=gate.name,
                role=gate.role,
                rollout_id=gate.rollout_id,
                step_index=step,
                now=now,
                options=options,
                clock=shell.clock,
                control=control,
            )
            with control.write() as session:
                suite_jobs.finish(session, control.claim, state="done", now=shell.clock())
            bound.info("suite run", verdict=result.verdict.value)
        except RunAbandoned:
            self._release(control, "stopped")
            bound.info("suite run stopped")
        except NotLeading as exc:
            bound.warning("suite run not kept", reason=str(exc))
        except Exception as exc:  # a background thread: report, never die silently
            self._release(control, f"{type(exc).__name__}: {exc}")
            bound.error("suite run failed", error=str(exc))

    def _release(self, control: _Control, reason: str) -> None:
        """Give the job back so it is claimed again at once (by us, or by the next leader)."""
        try:
            with control.write() as session:
                suite_jobs.release(session, control.claim, now=self.shell.wall(), reason=reason)
        except (RolloutdError, SQLAlchemyError) as exc:
            log.warning("suite job left to expire", job=control.claim.job_id, error=str(exc))

    def _stop(self, job_id: int) -> None:
        with self._lock:
            run = self._runs.get(job_id)
        if run is not None:
            run.control.stop.set()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="suite")
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
            with self.shell.read() as session:
                return records.schema_counts(session, rollout_id=rollout_id, role=role, since=since)

        return SuiteFedSource(source, counts)

    def stop(self) -> None:
        """Claim nothing more, and stop the runs in flight (their requests are abandoned
        within a tenth of a second; each releases its claim while the lease is still ours)."""
        self._closing = True
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.control.stop.set()

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the runs to end; whether they all did."""
        with self._lock:
            futures = [run.future for run in self._runs.values()]
        done, _ = wait(futures, timeout=timeout)
        return len(done) == len(futures)

    def close(self) -> None:
        """Stop the runs and the pool (the daemon does not wait for a run's thread)."""
        self.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _options(plan: Plan, spec: SuiteGate, instance: str) -> RunnerOptions:
    from rolloutd.evaluation.runner import RunnerOptions

    # The simulated fleet reads the expected call to know which answer to perturb; the
    # User-Agent tells an engine's access log which rolloutd asked.
    return RunnerOptions(
        concurrency=spec.concurrency,
        send_expected=plan.metrics.source == "simulator",
        headers={"User-Agent": f"rolloutd ({instance})"},
    )
