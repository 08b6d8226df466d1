"""Running real ``rolloutd run`` processes in tests, and reading back what they did.

:class:`Daemons` spawns daemons (and kills every one of them at teardown, stopped ones
included), :class:`Workspace` holds one rollout's plan, router file and metrics file,
and :class:`Db` reads the audit trail a test asserts on (:class:`Records`, which the e2e
stack reads with too). Nothing here sleeps for a fixed
time: :func:`wait_until` polls with a deadline.

The daemons run with a 3 s lease TTL (production: 15 s) so that takeovers happen in test
time. That is the shortest that works at all: the lease must outlive the daemon's 1 s main
loop plus its 2 s write margin (``rolloutd.reconcile.LEASE_MARGIN``). Even at 3 s a leader
refuses to tick for a moment at the end of each loop turn, which 200 ms ticks shrug off;
tests with 60 s ticks, or where the TTL costs no time, use more.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from sqlalchemy import make_url, text
from sqlalchemy.orm import Session

from rolloutd.operations import start_rollout, submit_command
from rolloutd.planfile import load_plan
from rolloutd.store.db import make_engine, session_factory, transaction
from tests.plans import file_plan

LEASE_TTL_SECONDS = 3.0
LOOP_SECONDS = 1.0  # the daemon's main-loop period: how often a standby tries to lead
START_TIMEOUT = 30.0  # importing rolloutd takes 1-2 s on a busy CI host; leave room
WAIT = 15.0  # the deadline for anything a test waits for without timing it


def takeover_bound(ttl: float) -> float:
    """How soon a standby leads after the leader's last renewal, at lease TTL ``ttl``.

    A standby tries to lead once per main-loop turn, so it may find the lease expired up to
    one loop after the TTL; the rest is polling /healthz and a busy CI host.
    """
    return ttl + LOOP_SECONDS + 1.0


TAKEOVER_BOUND = takeover_bound(LEASE_TTL_SECONDS)

T = TypeVar("T")


class WaitTimeout(Exception):
    """A :func:`wait_until` deadline passed.

    Not an AssertionError, so that a test marked ``xfail(raises=AssertionError)`` for a known
    bug does not pass as "expected failure" when something else breaks on the way to it.
    """


class DaemonExited(Exception):
    """A daemon exited while it was expected to start."""


def wait_until(
    predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.05
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    :raises WaitTimeout: naming ``what`` when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def assert_within(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Like :func:`wait_until`, for the behaviour under test: a deadline passing fails it.

    :raises AssertionError: naming ``what`` when ``timeout`` seconds pass first.
    """
    try:
        wait_until(predicate, timeout, what, interval=0.02)
    except WaitTimeout as exc:
        raise AssertionError(str(exc)) from None


# -- daemons --------------------------------------------------------------------------------


def daemon_env(
    url: str,
    instance: str,
    *,
    ttl: float | None = LEASE_TTL_SECONDS,
    env_file: str = "/nonexistent",
) -> dict[str, str]:
    """The environment of a test daemon: ours minus any ROLLOUTD_* setting, plus the given ones
    (a ``ttl`` of None keeps the daemon's own lease TTL; the benchmarks use that)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTD_")}
    env.pop("NOTIFY_SOCKET", None)
    env.update(
        ROLLOUTD_DATABASE_URL=url,
        ROLLOUTD_ENV_FILE=env_file,
        ROLLOUTD_INSTANCE_NAME=instance,
    )
    if ttl is not None:
        env["ROLLOUTD_LEASE_TTL_SECONDS"] = str(ttl)
    return env


def spawn_rolloutd(env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``rolloutd run`` with ``env``, /healthz on a port it picks (and logs), its
    output to ``log``."""
    return subprocess.Popen(
        ["rolloutd", "run", "--health-port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def parse_log_events(log: str) -> list[dict[str, Any]]:
    """The events of ``log``, a daemon's JSON-lines output (lines that are not JSON objects,
    such as a traceback's, are skipped)."""
    events = []
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


class Daemon:
    """One ``rolloutd run`` process, its JSON-lines log and its health endpoint."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.env = env
        self.log_path = log_path
        self.actor = f"rolloutd@{name}"
        self._log = log_path.open("wb")
        self.proc = spawn_rolloutd(env, self._log)
        self.pid = self.proc.pid
        self.port: int | None = None
        self.stopped = False

    # -- reading ---------------------------------------------------------------------------

    def log_lines(self) -> list[dict[str, Any]]:
        """The log events written so far (lines that are not JSON objects are skipped)."""
        return parse_log_events(self.log_path.read_text(errors="replace"))

    def logged(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        """The log events named ``event`` whose fields include ``fields``."""
        return [
            line
            for line in self.log_lines()
            if line.get("event") == event and all(line.get(k) == v for k, v in fields.items())
        ]

    def log_tail(self, lines: int = 40) -> str:
        """The end of the log, for failure reports."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def health(self) -> tuple[int, dict[str, Any]] | None:
        """``GET /healthz``: the status code and body, or None when nothing answers."""
        if self.port is None:
            return None
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/healthz", timeout=1.0
            ) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (OSError, ValueError):
            return None

    def role(self) -> str | None:
        """``leader`` or ``standby`` as /healthz says, or None when it does not answer."""
        answer = self.health()
        return None if answer is None else answer[1].get("role")

    @property
    def alive(self) -> bool:
        """Whether the process has not exited."""
        return self.proc.poll() is None

    # -- waiting ---------------------------------------------------------------------------

    def wait_serving(self, timeout: float = START_TIMEOUT) -> Daemon:
        """Wait until /healthz answers; fail at once, with the log, if the process exits."""

        def port() -> int | None:
            if not self.alive:
                raise DaemonExited(
                    f"rolloutd {self.name} exited with {self.proc.returncode} while starting:\n"
                    + self.log_tail()
                )
            for line in self.logged("health endpoint"):
                return int(str(line["url"]).rsplit(":", 1)[1].split("/")[0])
            return None

        self.port = wait_until(port, timeout, f"rolloutd {self.name} to serve /healthz")
        wait_until(self.health, 5.0, f"rolloutd {self.name} to answer /healthz")
        return self

    def wait_role(self, role: str, timeout: float) -> dict[str, Any]:
        """Wait until /healthz reports ``role``; return the health body."""

        def answer() -> dict[str, Any] | None:
            found = self.health()
            return found[1] if found is not None and found[1].get("role") == role else None

        return wait_until(answer, timeout, f"rolloutd {self.name} to be {role}", interval=0.02)

    # -- signals ---------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL, and reap the process."""
        self.resume()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM; return the exit code (fails if the process outlives ``timeout``)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"rolloutd {self.name} still running {timeout:g} s after SIGTERM:\n"
                + self.log_tail()
            ) from None

    def pause(self) -> None:
        """SIGSTOP: the process freezes mid-whatever, connections and locks included."""
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        """SIGCONT a paused process (a no-op otherwise)."""
        if self.stopped and self.alive:
            self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def close(self) -> None:
        """Kill the process if it is still running, stopped or not; close the log."""
        if self.alive:
            self.kill()
        self._log.close()


class Daemons:
    """Spawns daemons on one database and kills them all when closed."""

    def __init__(self, url: str, workdir: Path, *, ttl: float = LEASE_TTL_SECONDS) -> None:
        self.url = url
        self.workdir = workdir
        self.ttl = ttl
        self.spawned: list[Daemon] = []

    def spawn(
        self, name: str, *, ttl: float | None = None, env_file: str = "/nonexistent"
    ) -> Daemon:
        """Start ``rolloutd run`` as instance ``name`` and wait until it serves /healthz."""
        return self.start(name, ttl=ttl, env_file=env_file).wait_serving()

    def start(
        self, name: str, *, ttl: float | None = None, env_file: str = "/nonexistent"
    ) -> Daemon:
        """Start ``rolloutd run`` as instance ``name`` without waiting for it."""
        log_path = self.workdir / f"rolloutd-{name}-{len(self.spawned)}.log"
        url = self.url
        if make_url(url).get_backend_name() == "postgresql":
            # Each instance's backends are recognisable in pg_stat_activity and pg_locks.
            url = (
                make_url(url)
                .update_query_dict({"application_name": application_name(name)})
                .render_as_string(hide_password=False)
            )
        env = daemon_env(url, name, ttl=self.ttl if ttl is None else ttl, env_file=env_file)
        daemon = Daemon(name, env, log_path)
        self.spawned.append(daemon)
        return daemon

    def leader_and_standby(self) -> tuple[Daemon, Daemon]:
        """Instance ``a``, once it leads, and instance ``b``, once it stands by."""
        leader = self.spawn("a")
        leader.wait_role("leader", WAIT)
        standby = self.spawn("b")
        standby.wait_role("standby", WAIT)
        return leader, standby

    def close(self) -> None:
        """Kill every daemon still running, then print their logs' tails (shown on failure)."""
        for daemon in self.spawned:
            daemon.close()
        for daemon in self.spawned:
            print(f"--- {daemon.log_path.name} (exit {daemon.proc.returncode}) ---")
            print(daemon.log_tail(25))


@contextmanager
def running_daemons(
    url: str, workdir: Path, *, ttl: float = LEASE_TTL_SECONDS
) -> Iterator[Daemons]:
    """:class:`Daemons` whose processes are all killed when the block ends, however it ends."""
    pool = Daemons(url, workdir, ttl=ttl)
    try:
        yield pool
    finally:
        pool.close()


def application_name(instance: str) -> str:
    """The Postgres ``application_name`` of a test daemon's connections."""
    return f"rolloutd-{instance}"


def start_with_failpoints(
    pool: Daemons, name: str, failpoints: str, *, ttl: float | None = None
) -> Daemon:
    """Start ``rolloutd run`` on ``pool``'s Postgres database as :meth:`Daemons.start` does,
    with ``ROLLOUTD_FAILPOINTS`` set to ``failpoints`` (see ``rolloutd.failpoints``)."""
    url = (
        make_url(pool.url)
        .update_query_dict({"application_name": application_name(name)})
        .render_as_string(hide_password=False)
    )
    env = daemon_env(url, name, ttl=pool.ttl if ttl is None else ttl)
    env["ROLLOUTD_FAILPOINTS"] = failpoints
    daemon = Daemon(name, env, pool.workdir / f"rolloutd-{name}-{len(pool.spawned)}.log")
    pool.spawned.append(daemon)
    return daemon


def process_state(pid: int) -> str:
    """The state letter of process ``pid`` in ``/proc/PID/stat`` (``T``: stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def wait_frozen(daemon: Daemon, timeout: float = WAIT) -> None:
    """Wait until ``daemon``'s process is stopped (state ``T``), by a SIGSTOP from outside or
    one it sent itself at a failpoint; from then on :meth:`Daemon.resume` continues it."""
    wait_until(
        lambda: process_state(daemon.pid) == "T",
        timeout,
        f"rolloutd {daemon.name} to be stopped",
        interval=0.01,
    )
    daemon.stopped = True


# -- one rollout's files ----------------------------------------------------------------------


def canary(weight: int, bake: str, gates: tuple[str, ...] = ("errors",)) -> dict[str, Any]:
    """A canary step of a plan."""
    return {"kind": "canary", "weight": weight, "bake": bake, "gates": list(gates)}


PAUSE: dict[str, Any] = {"kind": "pause"}
FULL: dict[str, Any] = {"kind": "full"}


class Workspace:
    """A directory with one rollout's plan, its ``file`` router and its ``file`` metrics."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.plan_path = self.dir / "plan.yaml"
        self.router_path = self.dir / "weights.json"
        self.journal_path = self.dir / "weights.json.journal"
        self.metrics_path = self.dir / "metrics.json"

    def write_plan(
        self,
        steps: list[dict[str, Any]],
        *,
        interval: str = "200ms",
        trigger_interval: str = "200ms",
        **fields: Any,
    ) -> Path:
        """Write a plan of ``steps`` over this workspace's router and metrics files (service =
        name): an error-rate gate, and OOMs roll back; ``fields`` as in ``file_plan``."""
        gates = {
            "errors": {"kind": "threshold", "signal": "error_rate", "max": 0.01},
            "oom": {"kind": "events", "signal": "oom_events"},
        }
        plan = file_plan(
            self.name,
            self.router_path,
            self.metrics_path,
            **{
                "service": self.name,
                "interval": interval,
                "trigger_interval": trigger_interval,
                "gates": gates,
                "steps": steps,
                "triggers": ("oom",),
                **fields,
            },
        )
        self.plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
        if not self.metrics_path.exists():
            self.write_metrics()
        return self.plan_path

    def write_metrics(self, *, error_rate: float = 0.0, oom_events: int = 0) -> None:
        """Replace the metrics file atomically (the daemon may be reading it right now)."""
        document = {
            "error_rate": {"canary": {"value": error_rate, "samples": 1000}},
            "oom_events": {"canary": {"value": oom_events}},
        }
        tmp = self.metrics_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document))
        os.replace(tmp, self.metrics_path)

    def router_weight(self) -> int | None:
        """The canary weight in the router file, or None before anything was written."""
        if not self.router_path.exists():
            return None
        return int(json.loads(self.router_path.read_text())["canary_weight"])

    def journal(self) -> list[int]:
        """Every canary weight the router file was set to, in order."""
        if not self.journal_path.exists():
            return []
        return [
            int(json.loads(line)["canary_weight"])
            for line in self.journal_path.read_text().splitlines()
            if line.strip()
        ]


# -- the database -----------------------------------------------------------------------------


def start_rollout_in(
    db: Db, root: Path, name: str, steps: list[dict[str, Any]], **intervals: str
) -> tuple[Workspace, int]:
    """A workspace ``name`` under ``root`` with a plan of ``steps`` (and ``intervals``), and
    the id of its rollout, started."""
    workspace = Workspace(root, name)
    workspace.write_plan(steps, **intervals)
    return workspace, db.start_rollout(workspace.plan_path)


# A quiet rollout ticks every hour, and its next tick is at least this far away when it starts.
QUIET_INTERVAL = "1h"
QUIET_FOR = timedelta(minutes=10)


def quiet_rollout(start: Callable[[str, str], int]) -> int:
    """A rollout that acts only when a command wakes it, for as long as a test lasts.

    ``start(name, interval)`` starts a rollout of a plan called ``name`` ticking every
    ``interval``. Each rollout ticks at once, then on a grid of its own phase (its id times the
    golden ratio), so its second tick may come anywhere within the hour: the first rollout whose
    next grid tick is at least ten minutes away is the one returned. The phases of consecutive
    ids are 0.62 h apart, so the second try always is.
    """
    from rolloutd.daemon.jobs import PhasedInterval  # the daemon's own grid

    for name in ("quiet", "quiet-2", "quiet-3"):
        rollout = start(name, QUIET_INTERVAL)
        now = datetime.now(UTC)
        after = PhasedInterval.of(rollout, timedelta(hours=1)).get_next_fire_time(now, now)
        if after is not None and after - now >= QUIET_FOR:
            return rollout
    raise AssertionError("three rollouts in a row due to tick within ten minutes")


class Records:
    """Reading back what a daemon did, over a connection of the test's own."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = session_factory(self.engine)

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        """Run a query; rows as dicts."""
        with self.engine.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(text(sql), params)]

    def scalar(self, sql: str, **params: Any) -> Any:
        """Run a query; its one value."""
        with self.engine.connect() as connection:
            return connection.execute(text(sql), params).scalar()

    def state(self, rollout_id: int) -> str:
        """The rollout's state, as the daemon last wrote it."""
        return str(self.scalar("SELECT state FROM rollouts WHERE id = :id", id=rollout_id))

    def events(self, rollout_id: int | None = None) -> list[dict[str, Any]]:
        """A rollout's events (or the daemon-level ones, for None), oldest first."""
        where = "rollout_id IS NULL" if rollout_id is None else "rollout_id = :id"
        return self.rows(
            "SELECT id, rollout_id, at, kind, actor, detail, data"
            f" FROM events WHERE {where} ORDER BY id",
            id=rollout_id,
        )

    def event_kinds(self, rollout_id: int | None = None) -> list[str]:
        """The kinds of a rollout's events (or of the daemon-level ones), oldest first."""
        return [event["kind"] for event in self.events(rollout_id)]


class Db(Records):
    """The test's own connection to the daemons' database: what they did, and the writes
    an operator makes."""

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction."""
        with transaction(self.sessions) as session:
            yield session

    def start_rollout(self, plan_path: Path) -> int:
        """Create a pending rollout of the plan file (as ``rolloutctl start`` does)."""
        with self.session() as session:
            return start_rollout(
                session, load_plan(plan_path), actor="tester", now=datetime.now(UTC)
            )

    def command(self, rollout_id: int, kind: Any, *, reason: str | None = None) -> int:
        """Queue an operator command (as ``rolloutctl`` does, NOTIFY included)."""
        with self.session() as session:
            return submit_command(
                session, rollout_id, kind, actor="tester", reason=reason, now=datetime.now(UTC)
            ).id

    def execute(self, sql: str, **params: Any) -> None:
        """Run a statement and commit."""
        with self.engine.begin() as connection:
            connection.execute(text(sql), params)

    def pending_actions(self, rollout_id: int) -> int:
        """How many of the rollout's actions are written but not yet performed."""
        return int(
            self.scalar(
                "SELECT count(*) FROM actions WHERE rollout_id = :id AND status = 'pending'",
                id=rollout_id,
            )
        )

    def lease(self) -> dict[str, Any] | None:
        """The leader lease row."""
        found = self.rows("SELECT holder, epoch, expires_at FROM leases WHERE name = 'leader'")
        return found[0] if found else None

    def expire_lease(self) -> None:
        """End the current lease now, as waiting out its TTL would (its holder must be dead)."""
        self.execute(
            "UPDATE leases SET expires_at = :past WHERE name = 'leader'",
            past=datetime.now(UTC) - timedelta(seconds=1),
        )

    def holds_lease_lock(self, instance: str) -> bool:
        """Whether a transaction of daemon ``instance`` has locked the lease table right now.

        A leader's write transaction holds the lease row FOR SHARE until it commits, and a
        renewal holds it for update; either shows as a lock on the table in ``pg_locks``.
        """
        return bool(
            self.scalar(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid"
                " WHERE s.application_name = :app AND l.relation = 'leases'::regclass"
                " AND l.granted AND l.mode IN ('RowShareLock', 'RowExclusiveLock')",
                app=application_name(instance),
            )
        )

    def close(self) -> None:
        """Close the connections."""
        self.engine.dispose()


# -- freezing a leader ------------------------------------------------------------------------


def wait_lease_renewed(db: Db) -> None:
    """Return just after the lease holder renewed its lease."""
    renewed = db.scalar("SELECT renewed_at FROM leases")
    wait_until(
        lambda: db.scalar("SELECT renewed_at FROM leases") != renewed,
        WAIT,
        "the leader to renew its lease",
        interval=0.01,
    )


def pause_outside_writes(daemon: Daemon, db: Db, rng: random.Random) -> None:
    """SIGSTOP ``daemon`` at a moment when none of its transactions holds the lease row.

    Every fenced write of a leader, and every renewal, locks the lease row first, so a daemon
    stopped without that lock has none of them in flight. One stopped inside a write holds
    the row until the server ends its idle transaction, which delays the takeover instead.
    """
    for _ in range(500):
        daemon.pause()
        wait_frozen(daemon, 5.0)
        if not db.holds_lease_lock(daemon.name):
            return
        daemon.resume()
        time.sleep(rng.uniform(0.005, 0.05))
    raise AssertionError(f"rolloutd {daemon.name} always held the lease lock")
