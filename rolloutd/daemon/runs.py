"""The leader's evaluation-runs job: one pass of ``EvaluationRuns`` every second, apart
from the ticks.

Evaluation runs are reconciled apart from the ticks (``rolloutd.reconcile.runs``), so this
job has an APScheduler of its own, as the ticks do (:mod:`.jobs`): in-memory, started paused,
resumed only while this instance leads; one thread and one pass at a time, since a pass only
reads the open jobs and claims or ends some (the runs themselves go on in the reconciler's
own pool).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from rolloutd.errors import RolloutdError
from rolloutd.reconcile import NotLeading
from rolloutd.reconcile.runs import EvaluationRuns
from rolloutd.store.errors import StoreError

log = structlog.get_logger("rolloutd.daemon")

RUNS_JOB = "evaluation-runs"
RUNS_EVERY_SECONDS = 1.0


class RunJobs:
    """Schedules :meth:`EvaluationRuns.reconcile` while this instance leads."""

    def __init__(
        self,
        runs: EvaluationRuns,
        *,
        wall: Callable[[], datetime],
        every_seconds: float = RUNS_EVERY_SECONDS,
    ) -> None:
        self.runs = runs
        self.wall = wall
        self.every_seconds = every_seconds
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone=UTC,
        )

    def start(self) -> None:
        """Start the scheduler paused: nothing runs until this instance leads."""
        self.scheduler.add_job(
            self.reconcile, IntervalTrigger(seconds=self.every_seconds), id=RUNS_JOB
        )
        self.scheduler.start(paused=True)

    def lead(self) -> None:
        """Leadership gained: look at the open jobs at once, then every period."""
        self.run_now()
        self.scheduler.resume()

    def stand_by(self) -> None:
        """Leadership lost: claim nothing more (runs in flight stop when renewing fails)."""
        self.scheduler.pause()

    def run_now(self) -> None:
        """Run the pass at once (after a step back of the wall clock, APScheduler 3 would
        otherwise wait as long as the clock stepped)."""
        with contextlib.suppress(JobLookupError):
            self.scheduler.modify_job(RUNS_JOB, next_run_time=self.wall())

    def shutdown(self) -> None:
        """Wait for the pass in flight and stop the scheduler (blocks)."""
        self.scheduler.shutdown(wait=True)

    def reconcile(self) -> None:
        """One pass (the job's function): errors are logged, never raised into the scheduler."""
        try:
            self.runs.reconcile()
        except NotLeading:
            return  # the lease lapsed between the main loop's turns; the next leader drives
        except (RolloutdError, StoreError) as exc:
            log.error("evaluation runs pass failed", error=str(exc).splitlines()[0])
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            log.exception("evaluation runs pass crashed")
