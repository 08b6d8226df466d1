"""The leader's scheduled work: one tick job per rollout it drives, and the alert sender.

APScheduler 3 runs with an in-memory job store, started paused and resumed only while this
instance leads (its docs forbid sharing a job store between schedulers); 8 threads, so a slow
rollout does not hold up the others, and no overlapping ticks of one rollout. A job thread never
calls the scheduler: ``shutdown(wait=True)`` holds the job-store lock while it joins the job
threads, so a job that removed or rescheduled itself would deadlock SIGTERM; it leaves a note
for the main loop's next :meth:`TickJobs.sync` instead.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_JOB_SUBMITTED,
    JobEvent,
    JobSubmissionEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from rolloutd.alerts.sender import Sender
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.errors import RolloutdError
from rolloutd.operations import plan_of
from rolloutd.reconcile import NotLeading, Reconciler
from rolloutd.store import queries
from rolloutd.store.db import transaction
from rolloutd.store.errors import StaleWrite
from rolloutd.store.retention import compact_ended

log = structlog.get_logger("rolloutd.daemon")

SENDER_JOB = "alert-sender"
# The sender paces each webhook to one message a second; it looks for work twice as often.
SEND_EVERY_SECONDS = 0.5
WORKERS = 8
COMPACT_JOB = "compact-evaluations"
# Retention runs daily; first a few minutes after this instance leads, off the busy start.
COMPACT_EVERY = timedelta(days=1)
COMPACT_FIRST_AFTER = timedelta(minutes=5)


# Rollout phases are spread by the golden ratio: any number of them stay evenly apart.
_GOLDEN = 0.6180339887498949
_GRID_START = datetime(2000, 1, 1, tzinfo=UTC)


class PhasedInterval(IntervalTrigger):  # type: ignore[misc]  # APScheduler 3 ships no types
    """Every ``interval`` on a grid of its own phase, after a first run at once.

    A leader that takes over (or starts) adds every rollout's job in the same second; plain
    intervals would then tick them all in the same instant, every interval, and the last of a
    thousand would start seconds late. Each rollout's grid is offset by its id times the golden
    ratio (mod the interval), so the ticks spread evenly over the interval.
    """

    @classmethod
    def of(cls, rollout_id: int, interval: timedelta) -> PhasedInterval:
        """The trigger of rollout ``rollout_id`` ticking every ``interval``."""
        seconds = interval.total_seconds()
        phase = (rollout_id * _GOLDEN) % 1.0 * seconds
        return cls(seconds=seconds, start_date=_GRID_START + timedelta(seconds=phase), timezone=UTC)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The first grid time after ``previous_fire_time`` (or from ``now`` without one)."""
        if previous_fire_time is None:
            found: datetime | None = super().get_next_fire_time(None, now)
            return found
        start, every = self.start_date.timestamp(), self.interval_length
        after = previous_fire_time.timestamp()
        steps = math.floor((after - start) / every) + 1
        moment = start + steps * every
        if moment - after < 0.001:  # a grid time read back to the microsecond: the next one
            moment += every
        return datetime.fromtimestamp(moment, tz=UTC)


@dataclass(eq=False)
class TickJobs:
    """Keeps one tick job per rollout the leader drives, and runs the ticks."""

    sessions: sessionmaker[Session]
    reconciler: Reconciler
    metrics: DaemonMetrics
    sender: Sender
    _: KW_ONLY
    instance: str
    wall: Callable[[], datetime]
    clock: Callable[[], datetime]
    stopping: threading.Event
    leading: Callable[[], bool]
    retention: timedelta = timedelta(days=90)
    compact_first_after: timedelta = COMPACT_FIRST_AFTER

    def __post_init__(self) -> None:
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=WORKERS)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone=UTC,
        )
        self._lock = threading.Lock()
        self._wakeups: set[int] = set()
        self._ended: set[int] = set()  # rollouts whose job the main loop is to remove
        self._retry: set[int] = set()  # rollouts whose abandoned tick is to run again soon
        # Tick job id -> the due time of its submitted run; and the runs that started before
        # the scheduler's thread reported their submission (whose due time is then dropped).
        self._due: dict[str, datetime] = {}
        self._early: set[str] = set()
        self.scheduler.add_listener(self._submitted, EVENT_JOB_SUBMITTED)
        self.scheduler.add_listener(self._missed, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)

    # -- the main loop's side ---------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler paused: nothing runs until this instance leads."""
        self.scheduler.start(paused=True)

    def lead(self) -> None:
        """Leadership gained: finish what the last leader started, then run the jobs."""
        self.replay_all()
        self.scheduler.resume()

    def stand_by(self) -> None:
        """Leadership lost: run nothing more."""
        self.scheduler.pause()
        self.scheduler.remove_all_jobs()
        with self._lock:
            self._due.clear()
            self._early.clear()

    def shutdown(self) -> None:
        """Wait for the ticks in flight and stop the scheduler (blocks)."""
        self.scheduler.shutdown(wait=True)

    def count(self) -> int:
        """How many rollouts have a tick job."""
        return sum(job.id.startswith("tick-") for job in self.scheduler.get_jobs())

    def shortest_interval(self, default: timedelta) -> timedelta:
        """The shortest tick interval of the jobs (``default`` without rollouts)."""
        intervals: list[timedelta] = [
            job.trigger.interval for job in self.scheduler.get_jobs() if job.id.startswith("tick-")
        ]
        return min(intervals, default=default)

    def run_all_now(self) -> None:
        """Run every job at once: after a step back of the wall clock, APScheduler 3 (run
        times on the wall clock) would otherwise wait as long as the clock stepped."""
        now = self.wall()
        for job in self.scheduler.get_jobs():
            with contextlib.suppress(JobLookupError):
                self.scheduler.modify_job(job.id, next_run_time=now)

    def replay_all(self) -> None:
        """A new leader first finishes what the last one started, ended rollouts included."""
        try:
            with transaction(self.sessions) as session:
                owed = {a.rollout_id for a in queries.pending_actions(session)}
            active = {r.id for r in self._active()}
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("cannot read the intent log", error=str(exc))
            return
        for rollout_id in sorted(owed - active):
            self.tick(rollout_id)

    def sync(self) -> None:
        """Match the jobs to the rollouts to drive: active ones, ended ones that still owe an
        action (the final alert of a tick that ended it and then failed to mark it done), and
        ended ones whose router stays verified while a late write may land."""
        try:
            rollouts = self._active()
            with transaction(self.sessions) as session:
                owing = {a.rollout_id for a in queries.pending_actions(session)}
                known = {r.id for r in rollouts}
                rollouts += [queries.get_rollout(session, i) for i in sorted(owing - known)]
                since = self.clock() - self.reconciler.watch_window(None)
                known |= owing
                rollouts += [r for r in queries.ended_since(session, since) if r.id not in known]
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("cannot list active rollouts", error=str(exc))
            return
        with self._lock:
            ended, self._ended = self._ended, set()
        wanted = {f"tick-{r.id}": r for r in rollouts if r.id not in ended}
        for job in self.scheduler.get_jobs():
            if job.id not in wanted and job.id not in (SENDER_JOB, COMPACT_JOB):
                job.remove()
                with self._lock:
                    self._due.pop(job.id, None)
                    self._early.discard(job.id)
                if job.id.startswith("tick-"):
                    # Its router, metrics source and executor go with it.
                    self.reconciler.drivers.forget(int(job.id.removeprefix("tick-")))
        if self.scheduler.get_job(SENDER_JOB) is None:
            self.scheduler.add_job(
                self.send_alerts, IntervalTrigger(seconds=SEND_EVERY_SECONDS), id=SENDER_JOB
            )
        if self.scheduler.get_job(COMPACT_JOB) is None:
            self.scheduler.add_job(
                self.compact,
                IntervalTrigger(seconds=COMPACT_EVERY.total_seconds()),
                id=COMPACT_JOB,
                next_run_time=self.wall() + self.compact_first_after,
            )
        for job_id, rollout in wanted.items():
            if self.scheduler.get_job(job_id) is None:
                self.scheduler.add_job(
                    self.tick,
                    PhasedInterval.of(rollout.id, plan_of(rollout).trigger_interval),
                    args=[rollout.id],
                    id=job_id,
                    next_run_time=self.wall(),
                )
        with self._lock:
            retry, self._retry = self._retry, set()
        for rollout_id in retry:
            with contextlib.suppress(JobLookupError):
                self.scheduler.modify_job(f"tick-{rollout_id}", next_run_time=self.wall())

    def _active(self) -> list[Any]:
        with transaction(self.sessions) as session:
            return queries.list_rollouts(session, active_only=True, limit=10_000)

    # -- wake-ups ---------------------------------------------------------------------------

    def wake(self, rollout_id: int) -> None:
        """Tick ``rollout_id`` now (a command arrived), or again right after the tick in flight."""
        with self._lock:
            self._wakeups.add(rollout_id)
        # A rollout without a job is not active yet; the next job sync picks it up.
        with contextlib.suppress(JobLookupError):
            self.scheduler.modify_job(f"tick-{rollout_id}", next_run_time=self.wall())

    def command_written(self, payload: str) -> None:
        """A NOTIFY's payload is the id of the rollout a command was written for."""
        if self.leading() and payload.isdigit():
            self.wake(int(payload))

    def wake_all(self) -> None:
        """Tick every rollout now: NOTIFYs sent while the listener was reconnecting are lost."""
        if not self.leading():
            return
        for job in self.scheduler.get_jobs():
            if job.id.startswith("tick-"):
                self.wake(int(job.id.removeprefix("tick-")))

    # -- the job threads' side --------------------------------------------------------------

    def _submitted(self, event: JobSubmissionEvent) -> None:
        if event.job_id.startswith("tick-"):
            with self._lock:
                if event.job_id in self._early:
                    self._early.discard(event.job_id)
                else:
                    self._due[event.job_id] = max(event.scheduled_run_times)

    def _missed(self, event: JobEvent) -> None:
        if event.job_id.startswith("tick-"):
            self.metrics.ticks_missed.inc()

    def tick(self, rollout_id: int) -> None:
        """One scheduled tick of a rollout, and again at once while a wake-up is pending."""
        bound = log.bind(rollout=rollout_id, instance=self.instance)
        job_id = f"tick-{rollout_id}"
        with self._lock:
            due = self._due.pop(job_id, None)
            if due is None:
                self._early.add(job_id)
        if due is not None:
            self.metrics.tick_lag.observe(max(0.0, (self.wall() - due).total_seconds()))
        structlog.contextvars.bind_contextvars(rollout=rollout_id)
        try:
            while not self.stopping.is_set():
                with self._lock:
                    if rollout_id in self._ended:
                        return  # ended; the main loop removes the job
                    self._wakeups.discard(rollout_id)
                with self.metrics.ticking():
                    result = self.reconciler.tick(rollout_id)
                if result.state.terminal and not result.watching and self._owes_nothing(rollout_id):
                    with self._lock:
                        self._ended.add(rollout_id)
                    return
                with self._lock:
                    if rollout_id not in self._wakeups:
                        return
        except (NotLeading, StaleWrite) as exc:
            bound.warning("tick abandoned: not leading", error=str(exc))
            # A command's wake-up must not be lost to a lease renewal in flight: the main
            # loop runs it again on its next turn.
            with self._lock:
                self._retry.add(rollout_id)
        except RolloutdError as exc:
            bound.error("tick failed", error=str(exc))
        except SQLAlchemyError as exc:
            bound.error("tick failed: database error", error=str(exc).splitlines()[0])
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            bound.exception("tick crashed")
        finally:
            structlog.contextvars.unbind_contextvars("rollout")

    def send_alerts(self) -> None:
        """The sender job: deliver what the outbox holds (leader only; the scheduler pauses)."""
        try:
            self.sender.run_once()
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("alert sender failed", error=str(exc).splitlines()[0])
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            log.exception("alert sender crashed")

    def compact(self) -> None:
        """The retention job: compact the evaluations of rollouts that ended longer ago than
        the retention period, each rollout in a transaction fenced by the lease."""
        shell = self.reconciler.shell
        try:
            done = compact_ended(lambda: shell.write(shell.held()), self.clock() - self.retention)
        except NotLeading:
            return  # the next leader compacts
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("compacting evaluations failed", error=str(exc).splitlines()[0])
            return
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            log.exception("compacting evaluations crashed")
            return
        if done:
            deleted = sum(c.deleted for c in done)
            log.info("compacted evaluations", rollouts=len(done), deleted=deleted)

    def _owes_nothing(self, rollout_id: int) -> bool:
        with transaction(self.sessions) as session:
            return not queries.pending_actions(session, rollout_id)
