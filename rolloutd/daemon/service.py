"""The long-running service: one fenced leader, scheduled ticks, systemd and signals.

Every instance runs the same main loop: renew (or try to take) the leader lease, start
or stop the scheduler to match, keep one tick job per active rollout, and tell systemd
it is alive. APScheduler runs with an in-memory job store, started paused and resumed
only while this instance leads (its docs forbid sharing a job store between schedulers).
On any database error the leader stops acting first and asks questions later.

Three clocks: rollout time (bakes, deadlines) is an :class:`~rolloutd.clock.AnchoredClock`,
so a step of the wall clock neither stretches nor shortens a bake; liveness (``/healthz``)
is monotonic; leases, alerts and APScheduler's run times are on the wall clock. Each step
of the wall clock is recorded once as a ``clock_jump`` event, and every job is run at once
so that a step back does not hold the ticks up for as long as it stepped.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.exc import SQLAlchemyError

from rolloutd import failpoints
from rolloutd.alerts.enqueue import enqueue_leadership_alert
from rolloutd.alerts.sender import Sender
from rolloutd.alerts.webhooks import Webhooks
from rolloutd.clock import AnchoredClock, utc_now
from rolloutd.daemon.health import HealthServer
from rolloutd.daemon.listener import CommandListener
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.daemon.sdnotify import Notifier, watchdog_interval
from rolloutd.drivers import Drivers, PlanDrivers
from rolloutd.errors import PermanentError, RolloutdError
from rolloutd.operations import plan_of
from rolloutd.reconcile import LEASE_MARGIN, NotLeading, Reconciler
from rolloutd.settings import Settings
from rolloutd.store import lease, queries
from rolloutd.store.commands import COMMANDS_CHANNEL
from rolloutd.store.db import check_revision as check_schema
from rolloutd.store.db import (
    describe,
    lock_timed_out,
    make_engine,
    normalise_url,
    session_factory,
    transaction,
)
from rolloutd.store.errors import StaleWrite

log = structlog.get_logger("rolloutd.daemon")

Clock = Callable[[], datetime]

SENDER_JOB = "alert-sender"
# The sender paces each webhook to one message a second; it looks for work twice as often.
SEND_EVERY_SECONDS = 0.5
# Without rollouts nothing bakes, and a step under a second delays the alert sender by less
# than one main-loop turn (and chrony/ntpd slew rather than step offsets that small).
IDLE_JUMP_THRESHOLD = timedelta(seconds=1)


@dataclass(frozen=True)
class _Jump:
    """A step of the wall clock, the ``number``-th this process saw, noticed at ``at``."""

    number: int
    step: timedelta
    at: datetime

    def detail(self) -> str:
        """The event's sentence, for operators reading the audit log."""
        seconds = self.step.total_seconds()
        direction = "back" if seconds < 0 else "forward"
        size = f"{abs(seconds):.1f}".removesuffix(".0")
        return (
            f"the wall clock stepped {direction} {size} s; bakes and deadlines keep counting "
            "elapsed time"
        )


# How long SIGTERM waits for suite runs to abandon their requests and release their jobs.
SUITE_STOP_SECONDS = 2.0


class Daemon:
    """One rolloutd process: leader or standby."""

    def __init__(
        self,
        settings: Settings,
        *,
        drivers: Drivers | None = None,
        clock: Clock | None = None,
        wall: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        loop_seconds: float = 1.0,
        health_port: int | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.url = settings.database_url.get_secret_value()
        self.engine = make_engine(self.url, lease_ttl_seconds=settings.lease_ttl_seconds)
        self.sessions = session_factory(self.engine)
        self.wall = wall
        self.monotonic = monotonic
        # Watches the wall clock for steps, whichever clock the rollouts run on.
        self.anchored = AnchoredClock(wall=wall, monotonic=monotonic)
        self.clock = clock or self.anchored
        self.loop_seconds = loop_seconds
        self.ttl = timedelta(seconds=settings.lease_ttl_seconds)
        self.instance = settings.instance_name or f"{socket.gethostname()}:{os.getpid()}"
        self.holder = f"{self.instance}/{uuid.uuid4().hex[:8]}"
        self.notifier = notifier or Notifier()
        self.held: lease.Held | None = None
        self.stopping = threading.Event()
        self.reload_requested = threading.Event()
        self.last_loop = monotonic()
        self._jumps_seen = 0
        self._jumps: list[_Jump] = []  # steps of the wall clock not recorded yet
        self.reconciler = Reconciler(
            self.sessions,
            drivers or PlanDrivers(),
            clock=self.clock,
            lease=lambda: self.held,
            instance=self.instance,
            wall=wall,
            margin=min(LEASE_MARGIN, self.ttl / 4),
            lease_ttl=lambda: self.ttl,
        )
        self.metrics = DaemonMetrics(
            self.sessions, instance=self.instance, wall=wall, leading=self._leading_epoch
        )
        self.sender = Sender(
            self.sessions,
            webhooks=Webhooks(),
            clock=wall,
            timeout=settings.alert_timeout_seconds,
            # A stopping daemon posts nothing more: a hanging Slack must not hold up SIGTERM.
            leading=lambda: not self.stopping.is_set() and self._leading_epoch() is not None,
            # Its writes are fenced by the lease a run started under.
            lease=lambda: self.held,
            actor=f"rolloutd@{self.instance}",
            observe=self.metrics.delivered,
        )
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=8)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone=UTC,
        )
        self._wakeups: set[int] = set()
        self._wakeups_lock = threading.Lock()
        self._ended: set[int] = set()  # rollouts whose job the main loop is to remove
        self._retry: set[int] = set()  # rollouts whose abandoned tick is to run again soon
        self._lock_file: Any = None
        self._health: HealthServer | None = None
        port = settings.health_port if health_port is None else health_port
        self._health_address = (settings.health_host, port)
        self._listener: CommandListener | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM; returns the process exit code."""
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        armed = failpoints.arm()
        if armed:
            log.warning("failpoints armed: for tests only", failpoints=armed)
        self._claim_sqlite()
        check_schema(self.engine)
        self._start_health()
        self.scheduler.start(paused=True)
        if self.engine.dialect.name == "postgresql":
            self._start_listener()
        log.info("starting", instance=self.instance, database=describe(self.url))
        ready = False
        beat = watchdog_interval()
        last_beat = 0.0
        while not self.stopping.is_set():
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self._reload()
            self._check_wall_clock()
            self._lead_or_stand_by()
            self.last_loop = self.monotonic()
            if not ready:
                self.notifier.ready(self._status())
                ready = True
            else:
                self.notifier.status(self._status())
            # The watchdog is fed from the main loop, so a hung loop is what systemd catches.
            monotonic = time.monotonic()
            if beat is not None and monotonic - last_beat >= beat:
                self.notifier.watchdog()
                last_beat = monotonic
            self.stopping.wait(self.loop_seconds)
        return self._shutdown()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop after the tick in flight; SIGHUP reloads settings."""

        def stop(signum: int, _frame: FrameType | None) -> None:
            log.info("stopping", signal=signal.Signals(signum).name)
            self.stopping.set()

        def reload(_signum: int, _frame: FrameType | None) -> None:
            self.reload_requested.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def _shutdown(self) -> int:
        self.notifier.stopping()
        # Suite runs are stopped first: their requests are abandoned at once, and each
        # releases its job under the lease, so the next leader restarts it without waiting.
        self.reconciler.suites.stop()
        self._drain_ticks()
        if not self.reconciler.suites.wait_stopped(SUITE_STOP_SECONDS):
            log.warning("a suite run did not stop in time; its job expires by itself")
        if self.held is not None:
            try:
                with transaction(self.sessions) as session:
                    now = self.wall()
                    # A lease that expired meanwhile is another's business: nothing to record.
                    if lease.release(session, self.held, now=now):
                        self._daemon_event(session, "leader_released", "gave up leadership", now)
                        enqueue_leadership_alert(
                            session,
                            change="released",
                            instance=self.instance,
                            epoch=self.held.epoch,
                            now=now,
                        )
            except (RolloutdError, SQLAlchemyError) as exc:
                log.warning("could not release the lease; it expires by itself", error=str(exc))
            self.held = None
        if self._health is not None:
            self._health.stop()
        self.sender.close()
        self.reconciler.close()
        self.engine.dispose()
        log.info("stopped", instance=self.instance)
        return 0

    def _drain_ticks(self) -> None:
        """Wait for the ticks in flight, renewing the lease meanwhile: a tick longer than the
        TTL would otherwise finish under a lease that a standby may already have taken, and
        have its writes refused."""
        drained = threading.Event()

        def shut_down() -> None:
            try:
                self.scheduler.shutdown(wait=True)
            finally:
                drained.set()

        threading.Thread(target=shut_down, name="rolloutd-drain", daemon=True).start()
        while not drained.wait(self.loop_seconds):
            if self.held is None:
                continue
            try:
                self.held = self._renew_or_acquire(was_leading=True)
            except (RolloutdError, SQLAlchemyError) as exc:
                log.error(
                    "database error while draining; the lease expires by itself", error=str(exc)
                )
                self.held = None
            if self.held is None:
                log.warning("lost leadership while draining ticks", instance=self.instance)

    def _claim_sqlite(self) -> None:
        """SQLite has no leases across hosts: allow one instance per database file."""
        url = normalise_url(self.url)
        if url.get_backend_name() != "sqlite" or not url.database:
            return
        path = Path(url.database + ".lock")
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise PermanentError(
                f"another rolloutd is already running on {describe(self.url)}; SQLite allows "
                "one instance (use Postgres to run a standby)"
            ) from None
        self._lock_file = handle

    def _start_health(self) -> None:
        host, port = self._health_address
        try:
            self._health = HealthServer(host, port, self._health_report, self.metrics.exposition)
        except OSError as exc:
            raise PermanentError(
                f"cannot serve /healthz on {host}:{port}: {exc.strerror}"
            ) from None
        self._health.start()
        log.info("health endpoint", url=f"http://{host}:{self._health.port}/healthz")

    def _health_report(self) -> tuple[bool, dict[str, Any]]:
        # Monotonic: a step back of the wall clock must not make a hung loop look fresh, nor a
        # step forward make a live one look dead.
        age = self.monotonic() - self.last_loop
        healthy = age < max(10 * self.loop_seconds, 5.0)
        held = self.held
        leading = held is not None and held.valid_at(self.wall())
        return healthy, {
            "role": "leader" if leading else "standby",
            "instance": self.instance,
            "epoch": held.epoch if held is not None and leading else None,
            "loop_age_seconds": round(age, 3),
            "rollouts": self._rollout_jobs(),
            # Not part of ``healthy``: without it commands still apply, at the next tick.
            "listener": None if self._listener is None else self._listener.state().for_health(),
        }

    def _leading_epoch(self) -> int | None:
        held = self.held
        return held.epoch if held is not None and held.valid_at(self.wall()) else None

    def _rollout_jobs(self) -> int:
        return sum(job.id.startswith("tick-") for job in self.scheduler.get_jobs())

    def _status(self) -> str:
        if self.held is None:
            return "standby"
        return f"leader (epoch {self.held.epoch}), {self._rollout_jobs()} active rollouts"

    def _reload(self) -> None:
        """SIGHUP: apply the log level, the lease TTL and the env file's webhook URLs now;
        name the changed settings that wait for a restart (see ``settings.RELOADABLE``)."""
        from rolloutd.logs import configure_logging
        from rolloutd.settings import RELOADABLE, load_settings, needs_restart

        try:
            fresh = load_settings()
        except RolloutdError as exc:
            log.error("settings reload failed; keeping the old settings", error=str(exc))
            return
        configure_logging(fresh.log_level)
        # The next renewal takes the new TTL; the tick's write margin follows it, or a lease
        # shortened to the margin would let the leader renew but never write.
        self.ttl = timedelta(seconds=fresh.lease_ttl_seconds)
        self.reconciler.shell.margin = min(LEASE_MARGIN, self.ttl / 4)
        # A new resolver reads the env file afresh, even an edit that kept the file's mtime.
        self.sender.webhooks = Webhooks()
        restart = needs_restart(self.settings, fresh)
        self.settings = self.settings.model_copy(
            update={field: getattr(fresh, field) for field in RELOADABLE}
        )
        log.info(
            "settings reloaded",
            log_level=fresh.log_level,
            lease_ttl_seconds=fresh.lease_ttl_seconds,
        )
        if restart:
            log.warning("settings changed that take effect at the next restart", settings=restart)

    # -- leadership -------------------------------------------------------------------------

    def _renew_or_acquire(self, was_leading: bool) -> lease.Held | None:
        """Renew the lease we hold, or try to take it; the new lease is ours only once the
        transaction has committed.

        Our own writes hold the lease row FOR KEY SHARE, which a renewal does not wait for;
        a renewal that still waits out the lock timeout (a takeover attempt, an operator's
        query) tries again until our lease would expire, since standing down bumps the
        epoch, aborts the ticks in flight and replays every action.

        :raises RolloutdError: the database cannot be reached.
        :raises SQLAlchemyError: any other database error, or a lock held past our lease.
        """
        while True:
            now = self.wall()
            try:
                with transaction(self.sessions) as session:
                    if self.held is not None:
                        held = lease.renew(session, self.held, ttl=self.ttl, now=now)
                    else:
                        held = lease.acquire(session, holder=self.holder, ttl=self.ttl, now=now)
                    if held is not None and not was_leading:
                        self._daemon_event(
                            session, "leader_acquired", f"leading with epoch {held.epoch}", now
                        )
                        enqueue_leadership_alert(
                            session,
                            change="acquired",
                            instance=self.instance,
                            epoch=held.epoch,
                            now=now,
                        )
                return held
            except SQLAlchemyError as exc:
                current = self.held
                if (
                    current is None
                    or not lock_timed_out(exc)
                    or self.stopping.is_set()
                    or not current.valid_at(self.wall(), margin=LEASE_MARGIN)
                ):
                    raise
                log.warning(
                    "lease renewal waited on a lock; retrying",
                    epoch=current.epoch,
                    lease_left_s=round((current.expires_at - self.wall()).total_seconds(), 1),
                )

    def _lead_or_stand_by(self) -> None:
        was_leading = self.held is not None
        try:
            self.held = self._renew_or_acquire(was_leading)
        except (RolloutdError, SQLAlchemyError) as exc:
            # Demote first: a leader that cannot reach the database must not act on stale facts.
            if self.held is not None:
                log.error("database error; standing down", error=str(exc))
            self.held = None
        if self.held is not None and not was_leading:
            log.info("leading", epoch=self.held.epoch, instance=self.instance)
            self._replay_all()
            self.scheduler.resume()
        elif self.held is None and was_leading:
            log.warning("lost leadership", instance=self.instance)
            self.scheduler.pause()
            self.scheduler.remove_all_jobs()
        if self.held is not None:
            self._sync_jobs()

    def _daemon_event(
        self,
        session: Any,
        kind: str,
        detail: str,
        now: datetime,
        *,
        data: dict[str, Any] | None = None,
        dedup_key: str | None = None,
    ) -> None:
        queries.append_event(
            session,
            rollout_id=None,
            kind=kind,
            actor=f"rolloutd@{self.instance}",
            detail=detail,
            data=data,
            now=now,
            dedup_key=dedup_key,
        )

    def _replay_all(self) -> None:
        """A new leader first finishes what the last one started, ended rollouts included."""
        try:
            with transaction(self.sessions) as session:
                owed = {a.rollout_id for a in queries.pending_actions(session)}
            active = {r.id for r in self._active()}
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("cannot read the intent log", error=str(exc))
            return
        for rollout_id in sorted(owed - active):
            self._tick(rollout_id)

    def _active(self) -> list[Any]:
        with transaction(self.sessions) as session:
            return queries.list_rollouts(session, active_only=True, limit=10_000)

    def _sync_jobs(self) -> None:
        # A rollout keeps its job while it is active or still owes an action (the final
        # alert of a tick that ended it and then failed to mark the alert done).
        try:
            rollouts = self._active()
            with transaction(self.sessions) as session:
                owing = {a.rollout_id for a in queries.pending_actions(session)}
                known = {r.id for r in rollouts}
                rollouts += [queries.get_rollout(session, i) for i in sorted(owing - known)]
                # An ended rollout's router stays verified while a late write may land.
                since = self.clock() - self.reconciler.watch_window(None)
                known |= owing
                rollouts += [r for r in queries.ended_since(session, since) if r.id not in known]
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("cannot list active rollouts", error=str(exc))
            return
        with self._wakeups_lock:
            ended, self._ended = self._ended, set()
        wanted = {f"tick-{r.id}": r for r in rollouts if r.id not in ended}
        for job in self.scheduler.get_jobs():
            if job.id not in wanted and job.id != SENDER_JOB:
                job.remove()
        if self.scheduler.get_job(SENDER_JOB) is None:
            self.scheduler.add_job(
                self._send_alerts, IntervalTrigger(seconds=SEND_EVERY_SECONDS), id=SENDER_JOB
            )
        for job_id, rollout in wanted.items():
            if self.scheduler.get_job(job_id) is None:
                self.scheduler.add_job(
                    self._tick,
                    IntervalTrigger(seconds=plan_of(rollout).trigger_interval.total_seconds()),
                    args=[rollout.id],
                    id=job_id,
                    next_run_time=self.wall(),
                )
        with self._wakeups_lock:
            retry, self._retry = self._retry, set()
        for rollout_id in retry:
            with contextlib.suppress(JobLookupError):
                self.scheduler.modify_job(f"tick-{rollout_id}", next_run_time=self.wall())

    # -- the wall clock ---------------------------------------------------------------------

    def _check_wall_clock(self) -> None:
        """Note a step of the wall clock once, run every job now, and record the step."""
        step = self.anchored.jump(self._jump_threshold())
        if step is not None:
            now = self.wall()
            log.warning(
                "wall clock stepped", seconds=round(step.total_seconds(), 3), instance=self.instance
            )
            self._jumps_seen += 1
            self._jumps.append(_Jump(self._jumps_seen, step, now))
            # APScheduler 3 keeps run times on the wall clock: after a step back every job
            # would wait as long as the clock stepped before it ran again.
            for job in self.scheduler.get_jobs():
                with contextlib.suppress(JobLookupError):
                    self.scheduler.modify_job(job.id, next_run_time=now)
        if self._jumps:
            self._record_jumps()

    def _jump_threshold(self) -> timedelta:
        # A step shorter than the shortest tick interval moves a tick by less than one period,
        # as a slow tick may: not worth an event or a reschedule.
        intervals: list[timedelta] = [
            job.trigger.interval for job in self.scheduler.get_jobs() if job.id.startswith("tick-")
        ]
        return min(intervals, default=IDLE_JUMP_THRESHOLD)

    def _record_jumps(self) -> None:
        try:
            with transaction(self.sessions) as session:
                for jump in self._jumps:
                    self._daemon_event(
                        session,
                        "clock_jump",
                        jump.detail(),
                        jump.at,
                        data={"step_seconds": round(jump.step.total_seconds(), 3)},
                        # A write retried after an unclear commit records the jump once.
                        dedup_key=f"clock_jump/{self.holder}/{jump.number}",
                    )
        except (RolloutdError, SQLAlchemyError) as exc:
            # The log has the step already; the event is written on a later turn of the loop.
            log.error("cannot record the clock jump", error=str(exc).splitlines()[0])
            return
        self._jumps.clear()

    # -- ticks ------------------------------------------------------------------------------

    def wake(self, rollout_id: int) -> None:
        """Tick ``rollout_id`` now (a command arrived), or again right after the tick in flight."""
        with self._wakeups_lock:
            self._wakeups.add(rollout_id)
        # A rollout without a job is not active yet; the next job sync picks it up.
        with contextlib.suppress(JobLookupError):
            self.scheduler.modify_job(f"tick-{rollout_id}", next_run_time=self.wall())

    def _tick(self, rollout_id: int) -> None:
        bound = log.bind(rollout=rollout_id, instance=self.instance)
        structlog.contextvars.bind_contextvars(rollout=rollout_id)
        try:
            while not self.stopping.is_set():
                with self._wakeups_lock:
                    if rollout_id in self._ended:
                        return  # ended; the main loop removes the job
                    self._wakeups.discard(rollout_id)
                with self.metrics.ticking():
                    result = self.reconciler.tick(rollout_id)
                if result.state.terminal and not result.watching and self._owes_nothing(rollout_id):
                    self._drop_job(rollout_id)
                    return
                with self._wakeups_lock:
                    if rollout_id not in self._wakeups:
                        return
        except (NotLeading, StaleWrite) as exc:
            bound.warning("tick abandoned: not leading", error=str(exc))
            # A command's wake-up must not be lost to a lease renewal in flight: try again soon.
            # The main loop reschedules it: a job thread that calls the scheduler while
            # ``shutdown(wait=True)`` holds its lock and joins the job threads deadlocks.
            with self._wakeups_lock:
                self._retry.add(rollout_id)
        except RolloutdError as exc:
            bound.error("tick failed", error=str(exc))
        except SQLAlchemyError as exc:
            bound.error("tick failed: database error", error=str(exc).splitlines()[0])
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            bound.exception("tick crashed")
        finally:
            structlog.contextvars.unbind_contextvars("rollout")

    def _send_alerts(self) -> None:
        """The sender job: deliver what the outbox holds (leader only; the scheduler pauses)."""
        try:
            self.sender.run_once()
        except (RolloutdError, SQLAlchemyError) as exc:
            log.error("alert sender failed", error=str(exc).splitlines()[0])
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            log.exception("alert sender crashed")

    def _owes_nothing(self, rollout_id: int) -> bool:
        with transaction(self.sessions) as session:
            return not queries.pending_actions(session, rollout_id)

    def _drop_job(self, rollout_id: int) -> None:
        """Stop ticking a rollout that ended. The job is not removed here: a job that calls
        ``remove_job`` while ``scheduler.shutdown(wait=True)`` holds the job-store lock and
        joins the workers deadlocks SIGTERM. Its ticks return at once; the main loop's next
        job sync removes it."""
        with self._wakeups_lock:
            self._ended.add(rollout_id)

    # -- commands through LISTEN/NOTIFY -----------------------------------------------------

    def _start_listener(self) -> None:
        """Wake the right rollout when rolloutctl writes a command (Postgres only)."""
        dsn = normalise_url(self.url).set(drivername="postgresql")
        self._listener = CommandListener(
            dsn.render_as_string(hide_password=False),
            COMMANDS_CHANNEL,
            on_payload=self._command_written,
            on_recovered=self._wake_all,
            stopping=self.stopping,
            # As the engine's connections are named, unless the URL names them.
            application_name=None if "application_name" in dsn.query else "rolloutd",
        )
        self._listener.start()

    def _command_written(self, payload: str) -> None:
        """A NOTIFY's payload is the id of the rollout a command was written for."""
        if self.held is not None and payload.isdigit():
            self.wake(int(payload))

    def _wake_all(self) -> None:
        """Tick every rollout now: NOTIFYs sent while the listener was reconnecting are lost."""
        if self.held is None:
            return
        for job in self.scheduler.get_jobs():
            if job.id.startswith("tick-"):
                self.wake(int(job.id.removeprefix("tick-")))
