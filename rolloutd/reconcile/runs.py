"""Evaluation runs, reconciled apart from the tick: claimed, run, renewed, ended.

The tick only writes a due run's job and judges stored runs (``rolloutd.reconcile.suites``);
:class:`EvaluationRuns` drives the jobs, as Argo Rollouts' AnalysisRun controller does. The
daemon calls :meth:`EvaluationRuns.reconcile` every second or so while it leads. One pass
reads every open job with its rollout and brings each where it should be:

* ``cancelled`` when its rollout ended or is rolling back (the run would judge nothing),
* ``superseded`` when its step is over,
* ``failed`` after :data:`MAX_ATTEMPTS` claims that did not finish it,
* else claimed and run in a small background pool, if nobody's claim is live.

A job is held like a lease (``rolloutd.store.suite_jobs``): the holder's claim runs until
``acquired_until``, which the run moves forward every :attr:`EvaluationRuns.renew_every`
under the leader lease, and a request to an engine starts only while the claim outlives the
request's own timeout plus the margin. So once a claim has lapsed no request of its holder
is still in flight, and another instance may claim the job (the claim is one conditional
UPDATE): a new leader takes over an orphaned run, which continues with the cases that have
no result yet. Every write of a run checks its claim and the lease. On SIGTERM the runs are
stopped (their requests abandoned within a tenth of a second) and their claims released, so
the next leader takes them over at once. A job that ends otherwise than done is an event of
its rollout, with the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import structlog

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.core.progress import Progress
from rolloutd.errors import RolloutdError
from rolloutd.evaluation.held import JobRef
from rolloutd.evaluation.runner import RunAbandoned, RunnerOptions
from rolloutd.evaluation.schedule import run_suite_for_gate
from rolloutd.gates.base import Role
from rolloutd.operations import plan_of
from rolloutd.reconcile.shell import NotLeading, Shell
from rolloutd.store import suite_jobs
from rolloutd.store.errors import StoreError
from rolloutd.store.lease import Held
from rolloutd.store.suite_jobs import Claim
from rolloutd.store.suite_models import SuiteJob

if TYPE_CHECKING:
    from rolloutd.store.types import Session

log = structlog.get_logger("rolloutd.reconcile")

# Runs at once; a job waits, unclaimed, for a free worker.
WORKERS = 2
RENEW_AT_MOST_EVERY = timedelta(seconds=5)
# A job that failed this many claims in a row (a crash, a database error) is given up.
MAX_ATTEMPTS = 3


@dataclass
class _Control:
    """One claim's run: the job's fence and its stop switch (a ``RunControl``)."""

    runs: EvaluationRuns
    claim: Claim
    job: JobRef
    timeout_s: float
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def renew_every(self) -> float:
        return self.runs.renew_every.total_seconds()

    def permit(self, timeout_s: float) -> bool:
        shell = self.runs.shell
        outlive = timedelta(seconds=timeout_s) + shell.margin
        return not self.stop.is_set() and shell.wall() + outlive < self.claim.until

    def stopped(self) -> bool:
        return self.stop.is_set()

    def renew(self) -> None:
        shell = self.runs.shell
        try:
            with shell.write(shell.held()) as session:
                until = shell.wall() + self.runs.hold_for(self.timeout_s)
                renewed = suite_jobs.extend(session, self.claim, until=until)
        except NotLeading:
            renewed = None
        except (RolloutdError, StoreError) as exc:
            # The claim still runs to its expiry, and permit() stops new requests before it.
            log.warning("could not renew a suite job", job=self.job.name, error=str(exc))
            return
        if renewed is None:
            log.warning("lost a suite job; stopping its run", job=self.job.name)
            self.stop.set()
        else:
            self.claim = renewed

    @contextmanager
    def write(self) -> Iterator[Session]:
        shell = self.runs.shell
        with shell.write(shell.held()) as session:
            if not suite_jobs.holds(session, self.claim):
                raise NotLeading(f"suite job {self.job.name} is no longer ours")
            yield session


@dataclass
class _Run:
    future: Future[None]
    control: _Control


class EvaluationRuns:
    """Claims open suite jobs, runs them in the background, and ends the ones whose step or
    rollout is over."""

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

    def reconcile(self) -> int:
        """One pass over the open jobs; how many runs it started.

        :raises NotLeading: this instance does not lead; nothing was done.
        """
        if self._closing:
            return 0
        held = self.shell.held()
        with self._lock:
            self._runs = {key: run for key, run in self._runs.items() if not run.future.done()}
        with self.shell.read() as session:
            found = suite_jobs.open_jobs(session)
        started = 0
        for row, rollout in found:
            job = _snapshot(row)
            try:
                plan, progress = plan_of(rollout), Progress.from_storage(rollout.progress)
                started += self._drive(job, plan, progress, held)
            except NotLeading:
                raise
            except (RolloutdError, StoreError) as exc:
                # One job's trouble (a plan that no longer loads) must not hold up the others.
                log.error("evaluation run not driven", job=job.name, error=str(exc))
        return started

    def _drive(self, job: _Job, plan: Plan, progress: Progress, held: Held) -> int:
        """End the job if its step or rollout is over; else claim and start it if it is
        free. Returns 1 when a run started."""
        over = _over(job, plan, progress)
        if over is not None:
            state, reason = over
            self._end(job, state, reason, held)
            self._stop(job.id)
            return 0
        spec = plan.gates.get(job.gate)
        if not isinstance(spec, SuiteGate):
            self._end(job, "failed", f"the plan has no suite gate {job.gate!r}", held)
            return 0
        with self._lock:
            run = self._runs.get(job.id)
            if run is not None and not run.future.done():
                return 0
            self._runs.pop(job.id, None)
            busy = sum(not r.future.done() for r in self._runs.values())
        wall = self.shell.wall()
        if self._closing or busy >= WORKERS:
            return 0
        if job.acquired_until is not None and job.acquired_until > wall:
            return 0  # another instance's claim (or a stopped run's) has not lapsed
        if job.attempts >= MAX_ATTEMPTS:
            reason = f"given up after {job.attempts} attempts (last: {job.reason})"
            self._end(job, "failed", reason, held)
            return 0
        options = _options(plan, spec, self.shell.instance)
        with self.shell.write(held) as session:
            claim = suite_jobs.claim(
                session,
                job.id,
                attempts=job.attempts,
                holder=held.holder,
                until=wall + self.hold_for(options.timeout_s),
                now=wall,
            )
        if claim is None:
            return 0
        control = _Control(self, claim, JobRef(job.id, job.name, job.due_at), options.timeout_s)
        role: Role = "trigger" if job.gate in plan.rollback.triggers else "step"
        future = self._pool().submit(self._run, job, plan, spec, role, options, control)
        with self._lock:
            self._runs[job.id] = _Run(future, control)
            if self._closing:
                # stop() ran since the check above and did not see this run: stop it here.
                control.stop.set()
        return 1

    def _run(
        self,
        job: _Job,
        plan: Plan,
        spec: SuiteGate,
        role: Role,
        options: RunnerOptions,
        control: _Control,
    ) -> None:
        shell = self.shell
        bound = log.bind(rollout=job.rollout_id, gate=job.gate, job=job.name)
        try:
            result = run_suite_for_gate(
                shell.sessions,
                plan=plan,
                spec=spec,
                name=job.gate,
                role=role,
                rollout_id=job.rollout_id,
                step_index=job.step_index,
                now=shell.clock(),
                options=options,
                clock=shell.clock,
                control=control,
            )
            # An inconclusive run says why on its job (a live sample too small, a bad suite).
            reason = result.reason or None if result.verdict is Verdict.INCONCLUSIVE else None
            with control.write() as session:
                suite_jobs.finish(
                    session, control.claim, state="done", now=shell.clock(), reason=reason
                )
            bound.info("suite run", verdict=result.verdict.value)
        except RunAbandoned:
            self._release(control, "stopped")
            bound.info("suite run stopped")
        except NotLeading as exc:
            bound.warning("suite run not kept", reason=str(exc))
        except Exception as exc:  # a background thread: report, never die silently
            self._release(control, f"{type(exc).__name__}: {exc}")
            bound.error("suite run failed", error=str(exc))

    def _end(self, job: _Job, state: str, reason: str, held: Held) -> None:
        """End the job (whoever holds it) and say so in its rollout's events."""
        shell = self.shell
        now = shell.clock()
        with shell.write(held) as session:
            if suite_jobs.end_job(session, job.id, state=state, now=now, reason=reason):
                shell.event(
                    session,
                    job.rollout_id,
                    f"suite_run_{state}",
                    f"suite run {job.name} {state}: {reason}",
                    now=now,
                    dedup_key=f"{job.name}/{state}",
                    data={"job": job.name, "gate": job.gate, "state": state},
                )
        log_at = log.error if state == "failed" else log.info
        log_at("suite job ended", job=job.name, state=state, reason=reason)

    def _release(self, control: _Control, reason: str) -> None:
        """Give the job back so it is claimed again at once (by us, or by the next leader)."""
        try:
            with control.write() as session:
                suite_jobs.release(session, control.claim, now=self.shell.wall(), reason=reason)
        except (RolloutdError, StoreError) as exc:
            log.warning("suite job left to expire", job=control.job.name, error=str(exc))

    def _stop(self, job_id: int) -> None:
        with self._lock:
            run = self._runs.get(job_id)
        if run is not None:
            run.control.stop.set()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="suite")
        return self._executor

    def stop(self) -> None:
        """Claim nothing more, and stop the runs in flight (their requests are abandoned
        within a tenth of a second; each releases its claim while the lease is still ours)."""
        with self._lock:
            self._closing = True
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


@dataclass(frozen=True)
class _Job:
    """What a pass read of an open job."""

    id: int
    name: str
    rollout_id: int
    gate: str
    step_index: int
    due_at: datetime
    attempts: int
    acquired_until: datetime | None
    reason: str | None


def _snapshot(row: SuiteJob) -> _Job:
    return _Job(
        row.id,
        row.name,
        row.rollout_id,
        row.gate,
        row.step_index,
        row.due_at,
        row.attempts,
        row.acquired_until,
        row.reason,
    )


def _over(job: _Job, plan: Plan, progress: Progress) -> tuple[str, str] | None:
    """(state, reason) when the job's run would judge nothing any more."""
    if progress.ended is not None:
        return "cancelled", f"the rollout {progress.ended.replace('_', ' ')}"
    if progress.rollback is not None:
        return "cancelled", "the rollout is rolling back"
    if progress.step_index != job.step_index:
        return "superseded", f"{plan.step_named(progress.step_index)} began before the run finished"
    return None


def _options(plan: Plan, spec: SuiteGate, instance: str) -> RunnerOptions:
    # The simulated fleet reads the expected call to know which answer to perturb; the
    # User-Agent tells an engine's access log which rolloutd asked.
    return RunnerOptions(
        concurrency=spec.concurrency,
        send_expected=plan.metrics.source == "simulator",
        headers={"User-Agent": f"rolloutd ({instance})"},
    )
