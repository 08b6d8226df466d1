"""The leader's scheduled work: the batched tick of the rollouts it drives, the alert sender
and the retention job.

**The tick.** Each rollout is due on a grid of its own (its trigger interval, phased by its
id: :class:`PhasedInterval`). One ticker thread keeps every rollout's next due time in memory,
wakes at the earliest, and hands the rollouts then due to a pool of :data:`WORKERS` threads
in batches of at most :data:`BATCH` (one transaction a batch:
:meth:`~rolloutd.reconcile.Reconciler.tick_many`). A rollout still in its previous batch is
not handed out again; its grid moves on and the skipped due time counts as missed. The
workers are threads because a batch waits on routers and metrics sources more than it
computes; a slow source holds its own batch only. Batches of rollouts that reach nothing over
the network (a file router and metrics file: ``Plan.waits_on_network``) only compute, and
threads computing side by side contend for the interpreter lock: at 10,000 such rollouts,
eight threads spent 0.60-0.64 ms of CPU a rollout-tick where one spent 0.23-0.29. They run
one batch at a time, in a thread of their own.

**The rest.** APScheduler 3 runs the alert sender and the retention job, with an in-memory
job store, started paused and resumed only while this instance leads. A job thread never
calls the scheduler: ``shutdown(wait=True)`` holds the job-store lock while it joins the job
threads, so a job that removed or rescheduled itself would deadlock SIGTERM.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from rolloutd.alerts.sender import Sender
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.errors import RolloutdError
from rolloutd.reconcile import NotLeading, Reconciler
from rolloutd.reconcile.tick import Outcome
from rolloutd.store import queries
from rolloutd.store.db import transaction
from rolloutd.store.errors import StaleWrite, StoreError
from rolloutd.store.retention import compact_ended

if TYPE_CHECKING:
    from rolloutd.store.types import Sessions

log = structlog.get_logger("rolloutd.daemon")

SENDER_JOB = "alert-sender"
# The sender paces each webhook to one message a second; it looks for work twice as often.
SEND_EVERY_SECONDS = 0.5
# Batches run in this many threads: they wait on routers and metrics more than they compute.
WORKERS = 8
# A batch holds at most this many rollouts (one transaction of their decisions).
BATCH = 100
# The ticker looks again at least this often (seconds), for new rollouts and a leader's start.
IDLE_WAIT_SECONDS = 1.0
# Due rollouts are gathered for this long (seconds) between two hand-outs, so that batches
# are large enough to amortise their transaction; a command's wake-up is handed out at once.
GATHER_SECONDS = 0.5
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


@dataclass
class _Due:
    """A rollout the ticker drives: its grid (None until its first tick read its plan) and its
    next due time."""

    trigger: PhasedInterval | None
    due: datetime


@dataclass(eq=False)
class TickJobs:
    """Keeps the rollouts the leader drives on their grids, and ticks them in batches."""

    sessions: Sessions
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
            executors={"default": ThreadPoolExecutor(max_workers=2)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone=UTC,
        )
        self._lock = threading.Lock()
        self._kick = threading.Condition(self._lock)
        self._rollouts: dict[int, _Due] = {}
        self._in_flight: set[int] = set()
        self._wakeups: set[int] = set()  # rollouts to tick again as soon as they are free
        # No later than the soonest due time of a rollout not in flight (None: no rollout),
        # so that the ticker's wait looks at no rollout; a hand-out sets it exactly.
        self._soonest: datetime | None = None
        self._running = False  # the ticker hands out batches (this instance leads)
        self._closed = False  # the ticker is to end
        self._handed_at = 0.0  # when the ticker last handed out batches (monotonic)
        self._workers = futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="tick")
        self._local = futures.ThreadPoolExecutor(1, thread_name_prefix="tick-local")
        self._ticker = threading.Thread(target=self._tick_loop, name="ticker", daemon=True)

    # -- the main loop's side ---------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler and the ticker paused: nothing runs until this instance leads."""
        self.scheduler.start(paused=True)
        self._ticker.start()

    def lead(self) -> None:
        """Leadership gained: finish what the last leader started, then run the jobs."""
        self.replay_all()
        self.scheduler.resume()
        with self._kick:
            self._running = True
            self._kick.notify()

    def stand_by(self) -> None:
        """Leadership lost: run nothing more, and forget what was known as leader."""
        self.scheduler.pause()
        self.scheduler.remove_all_jobs()
        with self._kick:
            self._running = False
            self._rollouts.clear()
            self._wakeups.clear()
            self._soonest = None
        self.reconciler.forget()

    def shutdown(self) -> None:
        """Drop the batches not started, wait for those in flight, and stop the ticker and the
        scheduler (blocks)."""
        with self._kick:
            self._running = False
            self._closed = True
            self._kick.notify()
        # Batches not started yet are dropped at once: the next leader derives them again
        # from the stored facts, and a stop must fit systemd's TimeoutStopSec at any load.
        for pool in (self._workers, self._local):
            pool.shutdown(wait=False, cancel_futures=True)
        if self._ticker.is_alive():
            self._ticker.join()
        for pool in (self._workers, self._local):
            pool.shutdown(wait=True)
        self.scheduler.shutdown(wait=True)

    def count(self) -> int:
        """How many rollouts the ticker drives."""
        with self._lock:
            return len(self._rollouts)

    def ticking(self) -> bool:
        """Whether a batch is queued or running."""
        with self._lock:
            return bool(self._in_flight)

    def driving(self, rollout_id: int) -> bool:
        """Whether the ticker drives ``rollout_id``."""
        with self._lock:
            return rollout_id in self._rollouts

    def shortest_interval(self, default: timedelta) -> timedelta:
        """The shortest tick interval of the rollouts (``default`` without rollouts)."""
        with self._lock:
            grids = [d.trigger.interval for d in self._rollouts.values() if d.trigger is not None]
        return min(grids, default=default)

    def run_all_now(self) -> None:
        """Tick every rollout at once: after a step back of the wall clock, due times (on the
        wall clock) would otherwise wait as long as the clock stepped."""
        now = self.wall()
        with self._kick:
            for due in self._rollouts.values():
                due.due = now
            self._soonest = now
            self._kick.notify()
        for job in self.scheduler.get_jobs():
            with contextlib.suppress(JobLookupError):
                self.scheduler.modify_job(job.id, next_run_time=now)

    def replay_all(self) -> None:
        """A new leader first finishes what the last one started, ended rollouts included."""
        try:
            with transaction(self.sessions) as session:
                owed = {a.rollout_id for a in queries.pending_actions(session)}
            active = {r.id for r in self._active()}
        except (RolloutdError, StoreError) as exc:
            log.error("cannot read the intent log", error=str(exc))
            return
        self._run_batch(sorted(owed - active), {})

    def sync(self) -> None:
        """Match the rollouts driven to those to drive: active ones, ended ones that still
        owe an action (the final alert of a tick that ended it and then failed to mark it
        done), and ended ones whose router stays verified while a late write may land. One
        statement of ids; a rollout new to the ticker is due at once, and its grid is set from
        its plan once its first tick has read it."""
        try:
            since = self.clock() - self.reconciler.watch_window(None)
            with transaction(self.sessions) as session:
                wanted = queries.rollouts_to_drive(session, ended_since=since)
        except (RolloutdError, StoreError) as exc:
            log.error("cannot list active rollouts", error=str(exc))
            return
        now = self.wall()
        with self._kick:
            gone = [i for i in self._rollouts if i not in wanted]
            for rollout_id in gone:
                del self._rollouts[rollout_id]
            for rollout_id in wanted - self._rollouts.keys():
                self._rollouts[rollout_id] = _Due(None, now)
                self._sooner(now)
            self._kick.notify()
        for rollout_id in gone:
            # Its router, metrics source and executor go with it, and what was known of it.
            self.reconciler.drivers.forget(rollout_id)
            self.reconciler.forget(rollout_id)
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

    def _active(self) -> list[Any]:
        with transaction(self.sessions) as session:
            return queries.list_rollouts(session, active_only=True, limit=100_000)

    # -- wake-ups ---------------------------------------------------------------------------

    def wake(self, rollout_id: int) -> None:
        """Tick ``rollout_id`` now (a command arrived), or again right after the tick in flight."""
        with self._kick:
            # A rollout not driven yet is not active yet; the next sync picks it up.
            if rollout_id in self._rollouts:
                self._wakeups.add(rollout_id)
                self._kick.notify()

    def command_written(self, payload: str) -> None:
        """A NOTIFY's payload is the id of the rollout a command was written for."""
        if self.leading() and payload.isdigit():
            self.wake(int(payload))

    def wake_all(self) -> None:
        """Tick every rollout now: NOTIFYs sent while the listener was reconnecting are lost."""
        if not self.leading():
            return
        with self._kick:
            self._wakeups.update(self._rollouts)
            self._kick.notify()

    # -- the ticker -------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        """Hand out the due rollouts in batches, then sleep until the next is due."""
        while not self.stopping.is_set():
            with self._kick:
                if self._closed:
                    return
                if not self._running:
                    self._kick.wait(IDLE_WAIT_SECONDS)
                    continue
                pause = self._sleep(self.wall())
                if pause > 0:
                    self._kick.wait(pause)
                    continue
                batches = self._due_batches(self.wall())
                self._handed_at = time.monotonic()
            for ids, dues, local in batches:
                pool = self._local if local else self._workers
                try:
                    pool.submit(self._run_batch, ids, dues)
                except RuntimeError:  # the pool shut down: the daemon is stopping
                    return

    def _due_batches(self, now: datetime) -> list[tuple[list[int], dict[int, datetime], bool]]:
        """Take the rollouts due at ``now`` (and the woken ones) that are not in flight, move
        their grids on, and split them into batches, each with whether it reaches nothing
        over the network (under the lock)."""
        due: dict[int, datetime] = {}
        for rollout_id, entry in self._rollouts.items():
            if rollout_id in self._in_flight:
                continue
            if rollout_id in self._wakeups:
                self._wakeups.discard(rollout_id)
                due[rollout_id] = min(now, entry.due)
            elif entry.due <= now:
                due[rollout_id] = entry.due
            else:
                continue
            if entry.trigger is None:
                entry.due = now + timedelta(seconds=IDLE_WAIT_SECONDS)  # set after its tick
            elif entry.due <= now:
                entry.due, skipped = _next_due(entry.trigger, entry.due, now)
                if skipped:
                    self.metrics.ticks_missed.inc(skipped)
        self._in_flight.update(due)
        waiting = (d.due for i, d in self._rollouts.items() if i not in self._in_flight)
        self._soonest = min(waiting, default=None)
        # A rollout slow to observe (a slow metrics source) is ticked alone: it holds up no other.
        slow, local = self.reconciler.slow, self.reconciler.local
        batches = [([i], False) for i in due if i in slow]
        for lane in (True, False):
            ids = [i for i in due if i not in slow and (i in local) == lane]
            ids.sort(key=due.__getitem__)
            batches += [(ids[i : i + BATCH], lane) for i in range(0, len(ids), BATCH)]
        return [(batch, {r: due[r] for r in batch}, lane) for batch, lane in batches]

    def _place(self, ids: list[int]) -> None:
        """Put the rollouts that just had their first tick on their grids, and count every
        rollout of a finished batch among those waiting (under the lock)."""
        for rollout_id in ids:
            entry = self._rollouts.get(rollout_id)
            interval = self.reconciler.intervals.get(rollout_id)
            if entry is None:
                continue
            if entry.trigger is None and interval is not None:
                entry.trigger = PhasedInterval.of(rollout_id, interval)
                entry.due, _ = _next_due(entry.trigger, self.wall(), self.wall())
            self._sooner(entry.due)

    def _sooner(self, due: datetime) -> None:
        """A rollout not in flight is due at ``due`` (under the lock)."""
        if self._soonest is None or due < self._soonest:
            self._soonest = due

    def _sleep(self, now: datetime) -> float:
        """Seconds to wait before the next hand-out: none for a woken rollout; else until the
        next rollout not in flight is due, and the gathering time since the last hand-out is
        over (at most a second)."""
        if any(i not in self._in_flight for i in self._wakeups):
            return 0.0
        if self._soonest is None:
            return IDLE_WAIT_SECONDS
        due = (self._soonest - now).total_seconds()
        gathered = GATHER_SECONDS - (time.monotonic() - self._handed_at)
        return min(IDLE_WAIT_SECONDS, max(0.0, due, gathered))

    def _run_batch(self, ids: list[int], dues: dict[int, datetime]) -> None:
        """One batch of ticks, in a worker thread; what ended is let go at the next sync."""
        if not ids:
            return
        started = self.wall()
        for due in dues.values():
            self.metrics.tick_lag.observe(max(0.0, (started - due).total_seconds()))
        outcomes: dict[int, Outcome] = {}
        try:
            with self.metrics.ticking(len(ids)):
                outcomes = self.reconciler.tick_many(ids)
        except (NotLeading, StaleWrite) as exc:
            for rollout_id in ids:
                log.warning("tick abandoned: not leading", rollout=rollout_id, error=str(exc))
            # A command's wake-up must not be lost to a lease renewal in flight.
            with self._kick:
                self._wakeups.update(i for i in ids if i in self._rollouts)
        except RolloutdError as exc:
            for rollout_id in ids:
                log.error("tick failed", rollout=rollout_id, error=str(exc))
        except StoreError as exc:
            error = str(exc).splitlines()[0]
            for rollout_id in ids:
                log.error("tick failed: database error", rollout=rollout_id, error=error)
        except Exception:  # a bug must not kill the worker; it is logged in full
            log.exception("tick crashed", rollouts=ids)
        finally:
            with self._kick:
                self._in_flight.difference_update(ids)
                self._place(ids)
                self._kick.notify()
        for rollout_id, outcome in outcomes.items():
            if isinstance(outcome, RolloutdError):
                log.error("tick failed", rollout=rollout_id, error=str(outcome))

    def send_alerts(self) -> None:
        """The sender job: deliver what the outbox holds (leader only; the scheduler pauses)."""
        try:
            self.sender.run_once()
        except (RolloutdError, StoreError) as exc:
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
        except (RolloutdError, StoreError) as exc:
            log.error("compacting evaluations failed", error=str(exc).splitlines()[0])
            return
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            log.exception("compacting evaluations crashed")
            return
        if done:
            deleted = sum(c.deleted for c in done)
            log.info("compacted evaluations", rollouts=len(done), deleted=deleted)


def _next_due(trigger: PhasedInterval, due: datetime, now: datetime) -> tuple[datetime, int]:
    """The first grid time after ``now`` on ``trigger``'s grid from ``due``, and how many
    grid times were skipped on the way (due times passed while the rollout was busy)."""
    following = trigger.get_next_fire_time(due, now) or now
    skipped = 0
    while following <= now:
        skipped += 1
        following = trigger.get_next_fire_time(following, now) or now + trigger.interval
    return following, skipped
