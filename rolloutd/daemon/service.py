"""The long-running service's lifecycle: the main loop, systemd, signals and shutdown.

Every instance runs the same main loop: renew (or try to take) the leader lease
(:mod:`.leadership`), start or stop the scheduled ticks to match (:mod:`.jobs`), and tell
systemd it is alive. On any database error the leader stops acting first and asks questions
later.

Three clocks: rollout time (bakes, deadlines) is an :class:`~rolloutd.clock.AnchoredClock`,
so a step of the wall clock neither stretches nor shortens a bake; liveness (``/healthz``)
is monotonic; leases, alerts and APScheduler's run times are on the wall clock. Each step
of the wall clock is recorded once as a ``clock_jump`` event, and every job is run at once
so that a step back does not hold the ticks up for as long as it stepped.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from rolloutd import failpoints
from rolloutd.alerts.sender import Sender
from rolloutd.alerts.webhooks import Webhooks
from rolloutd.clock import AnchoredClock, utc_now
from rolloutd.daemon.health import HealthServer
from rolloutd.daemon.heap import Heap
from rolloutd.daemon.jobs import TickJobs
from rolloutd.daemon.leadership import Leadership, daemon_event
from rolloutd.daemon.listener import POLL_SECONDS, CommandListener
from rolloutd.daemon.metrics import DaemonMetrics
from rolloutd.daemon.runs import RunJobs
from rolloutd.daemon.sdnotify import Notifier, watchdog_interval
from rolloutd.drivers import Drivers, PlanDrivers
from rolloutd.errors import PermanentError, RolloutdError
from rolloutd.reconcile import LEASE_MARGIN, Reconciler
from rolloutd.reconcile.runs import EvaluationRuns
from rolloutd.settings import Settings
from rolloutd.store import lease
from rolloutd.store.commands import COMMANDS_CHANNEL
from rolloutd.store.db import (
    RoundTrips,
    describe,
    make_engine,
    normalise_url,
    session_factory,
    transaction,
)
from rolloutd.store.db import check_revision as check_schema
from rolloutd.store.errors import StoreError
from rolloutd.web.server import WebView

log = structlog.get_logger("rolloutd.daemon")

Clock = Callable[[], datetime]

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


# How long SIGTERM waits for evaluation runs to abandon their requests and release their jobs.
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
        self.instance = settings.instance_name or f"{socket.gethostname()}:{os.getpid()}"
        self.notifier = notifier or Notifier()
        self.stopping = threading.Event()
        self.leadership = Leadership(
            self.sessions,
            instance=self.instance,
            ttl=timedelta(seconds=settings.lease_ttl_seconds),
            wall=wall,
            stopping=self.stopping,
        )
        self.reload_requested = threading.Event()
        self.last_loop = monotonic()
        self._jumps_seen = 0
        self._jumps: list[_Jump] = []  # steps of the wall clock not recorded yet
        self.reconciler = Reconciler(
            self.sessions,
            drivers or PlanDrivers(),
            clock=self.clock,
            lease=lambda: self.leadership.held,
            instance=self.instance,
            wall=wall,
            margin=min(LEASE_MARGIN, self.leadership.ttl / 4),
            lease_ttl=lambda: self.leadership.ttl,
        )
        # Evaluation runs share the tick's shell (a SIGHUP's new margin reaches both).
        self.runs = EvaluationRuns(self.reconciler.shell, lease_ttl=lambda: self.leadership.ttl)
        self.run_jobs = RunJobs(self.runs, wall=wall)
        trips = RoundTrips(self.engine)
        self.metrics = DaemonMetrics(
            self.sessions,
            instance=self.instance,
            wall=wall,
            leading=self.leadership.epoch,
            round_trips=lambda: trips.count,
            ticks_running=self._ticks_running,
        )
        self.sender = Sender(
            self.sessions,
            webhooks=Webhooks(),
            clock=wall,
            timeout=settings.alert_timeout_seconds,
            # A stopping daemon posts nothing more: a hanging Slack must not hold up SIGTERM.
            leading=lambda: not self.stopping.is_set() and self.leadership.epoch() is not None,
            # Its writes are fenced by the lease a run started under.
            lease=lambda: self.leadership.held,
            actor=f"rolloutd@{self.instance}",
            observe=self.metrics.delivered,
            ui_url=settings.ui_url,
        )
        self.jobs = TickJobs(
            self.sessions,
            self.reconciler,
            self.metrics,
            self.sender,
            instance=self.instance,
            wall=wall,
            clock=self.clock,
            stopping=self.stopping,
            leading=lambda: self.leadership.held is not None,
            retention=settings.retention,
        )
        self._lock_file: Any = None
        self._health: HealthServer | None = None
        port = settings.health_port if health_port is None else health_port
        self._health_address = (settings.health_host, port)
        self._listener: CommandListener | None = None

    @property
    def held(self) -> lease.Held | None:
        """The lease this process holds (None: standing by)."""
        return self.leadership.held

    # -- lifecycle --------------------------------------------------------------------------

    def _ticks_running(self) -> bool:
        """Whether ticks run: a scrape gives way to them."""
        return self.jobs.ticking()

    def run(self) -> int:
        """Run until SIGTERM; returns the process exit code."""
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        armed = failpoints.arm()
        if armed:
            log.warning("failpoints armed: for tests only", failpoints=armed)
        self._claim_sqlite()
        check_schema(self.engine)
        self._start_health()
        self.jobs.start()
        self.run_jobs.start()
        if self.engine.dialect.name == "postgresql":
            self._start_listener()
        log.info("starting", instance=self.instance, database=describe(self.url))
        ready = False
        beat = watchdog_interval()
        last_beat = 0.0
        heap = Heap(time.monotonic)
        while not self.stopping.is_set():
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self._reload()
            self._check_wall_clock()
            self._lead_or_stand_by()
            heap.tend()
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
        # Evaluation runs are stopped first: their requests are abandoned at once, and each
        # releases its job under the lease, so the next leader takes it over without waiting.
        self.runs.stop()
        self._drain_ticks()
        if not self.runs.wait_stopped(SUITE_STOP_SECONDS):
            log.warning("a suite run did not stop in time; its job expires by itself")
        self.leadership.release()
        # It looks at the stop flag once a poll, then closes its connection.
        if self._listener is not None and not self._listener.join(2 * POLL_SECONDS):
            log.warning("the command listener did not stop in time")
        if self._health is not None:
            self._health.stop()
        self.sender.close()
        self.runs.close()
        self.reconciler.close()
        self.engine.dispose()
        log.info("stopped", instance=self.instance)
        return 0

    def _drain_ticks(self) -> None:
        """Wait for the ticks (and the evaluation-runs pass) in flight, renewing the lease
        meanwhile: a tick longer than the TTL would otherwise finish under a lease that a
        standby may already have taken, and have its writes refused."""
        drained = threading.Event()

        def shut_down() -> None:
            try:
                self.run_jobs.shutdown()
                self.jobs.shutdown()
            finally:
                drained.set()

        threading.Thread(target=shut_down, name="rolloutd-drain", daemon=True).start()
        while not drained.wait(self.loop_seconds):
            self.leadership.keep()

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
            token = self.settings.ui_token
            web = WebView(
                self.sessions,
                host=host,
                token=None if token is None else token.get_secret_value(),
                clock=self.clock,
            )
            self._health = HealthServer(
                host, port, self._health_report, self.metrics.chunks, web.handle
            )
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
            "rollouts": self.jobs.count(),
            # Not part of ``healthy``: without it commands still apply, at the next tick.
            "listener": None if self._listener is None else self._listener.state().for_health(),
        }

    def _status(self) -> str:
        if self.held is None:
            return "standby"
        return f"leader (epoch {self.held.epoch}), {self.jobs.count()} active rollouts"

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
        self.leadership.ttl = timedelta(seconds=fresh.lease_ttl_seconds)
        self.reconciler.shell.margin = min(LEASE_MARGIN, self.leadership.ttl / 4)
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

    # -- leadership ------------------------------------------------------------------------

    def _lead_or_stand_by(self) -> None:
        change = self.leadership.turn()
        if change == "gained":
            self.jobs.lead()
            self.run_jobs.lead()
        elif change == "lost":
            self.jobs.stand_by()
            self.run_jobs.stand_by()
        if self.leadership.held is not None:
            self.jobs.sync()

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
            self.jobs.run_all_now()
            self.run_jobs.run_now()
        if self._jumps:
            self._record_jumps()

    def _jump_threshold(self) -> timedelta:
        # A step shorter than the shortest tick interval moves a tick by less than one period,
        # as a slow tick may: not worth an event or a reschedule.
        return self.jobs.shortest_interval(IDLE_JUMP_THRESHOLD)

    def _record_jumps(self) -> None:
        try:
            with transaction(self.sessions) as session:
                for jump in self._jumps:
                    daemon_event(
                        session,
                        self.instance,
                        "clock_jump",
                        jump.detail(),
                        jump.at,
                        data={"step_seconds": round(jump.step.total_seconds(), 3)},
                        # A write retried after an unclear commit records the jump once.
                        dedup_key=f"clock_jump/{self.leadership.holder}/{jump.number}",
                    )
        except (RolloutdError, StoreError) as exc:
            # The log has the step already; the event is written on a later turn of the loop.
            log.error("cannot record the clock jump", error=str(exc).splitlines()[0])
            return
        self._jumps.clear()

    def wake(self, rollout_id: int) -> None:
        """Tick ``rollout_id`` now (a command arrived)."""
        self.jobs.wake(rollout_id)

    # -- commands through LISTEN/NOTIFY -----------------------------------------------------

    def _start_listener(self) -> None:
        """Wake the right rollout when rolloutctl writes a command (Postgres only)."""
        dsn = normalise_url(self.url).set(drivername="postgresql")
        self._listener = CommandListener(
            dsn.render_as_string(hide_password=False),
            COMMANDS_CHANNEL,
            on_payload=self.jobs.command_written,
            on_recovered=self.jobs.wake_all,
            stopping=self.stopping,
            # As the engine's connections are named, unless the URL names them.
            application_name=None if "application_name" in dsn.query else "rolloutd",
        )
        self._listener.start()
