"""Split brain with real processes: a leader frozen past its lease wakes up beside the new one.

rolloutd promises that a leader stopped (SIGSTOP, a VM pause, a network cut) until its lease
expired writes nothing once it wakes: every store write commits only under *its epoch and not
expired*, and a router write must land before a deadline that the lease outlives. Three ways in:

- freeze the leader at a seeded moment outside its writes, let the standby take over and act,
  then wake the old one: it writes no row to any table after its lease expired;
- the same, then stop it as systemd stops a hung service (SIGTERM, then SIGCONT): it exits at
  once, and writes nothing on its way out either;
- freeze it at the ``before_router_write`` failpoint, after it committed a weight and passed
  its last lease check: the new leader replays the weight and rolls the rollout back, and the
  woken leader's write never reaches the router, ``file`` or HAProxy.

Who wrote which row is taken from the database itself: a trigger on every table of the schema
(enumerated from ``pg_catalog`` when the test starts) records each row written, with its full
content and the writer's ``application_name``, which names the daemon instance.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from sqlalchemy import text

from rolloutd.routers.haproxy_api import RuntimeAPI
from tests.routers.services import (
    BACKEND,
    CANARY_SERVERS,
    STABLE_SERVERS,
    HAProxyService,
    Pools,
    find_binary,
)

from .helpers import (
    LEASE_TTL_SECONDS,
    LOOP_SECONDS,
    WAIT,
    Daemon,
    Daemons,
    Db,
    Workspace,
    application_name,
    canary,
    pause_outside_writes,
    start_with_failpoints,
    takeover_bound,
    wait_frozen,
    wait_lease_renewed,
    wait_until,
)

pytestmark = pytest.mark.postgres

# A 2 s lease makes a takeover cost 2-3 s a round. Store writes need only a quarter of it as
# margin; router writes (which need 1.5 s left) happen in the first half second after each
# renewal, which is enough for the rollouts here to move on.
SPLIT_BRAIN_TTL = 2.0
SPLIT_BRAIN_ROUNDS = 10
# HAProxy's write timeout is 3 x its 2 s socket timeout. A router write starts only while the
# lease outlives it by the 2 s margin: with a renewal each second, a 10 s lease leaves the
# leader a window of 1-2 s after each renewal.
HAPROXY_TTL = 10.0
WEIGHT = 30
# How long the router is watched after the woken leader gave up its write: several of the
# new leader's 200 ms ticks, each of which reads the router back and records a drift.
WATCH_SECONDS = 1.0


# -- who wrote what -----------------------------------------------------------------------------


class WriteAudit:
    """Every row written to any table of the daemons' schema, as a trigger saw it.

    Each record holds the table, the operation, the row's full content as JSON, the time
    (``clock_timestamp()``: the host clock the daemons' lease times are taken from), and the
    writer's ``application_name``. The records live in a schema of their own, so the audit
    does not audit itself, and a rolled-back write takes its records with it.
    """

    SCHEMA = "split_brain_audit"

    def __init__(self, db: Db) -> None:
        self.db = db
        self.tables: list[str] = []

    def install(self) -> None:
        """Audit every table of the schema, recording the rows already there as a baseline."""
        self.tables = [
            row["name"]
            for row in self.db.rows(
                "SELECT c.relname AS name FROM pg_class c"
                " WHERE c.relnamespace = current_schema()::regnamespace"
                " AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname"
            )
        ]
        s = self.SCHEMA
        with self.db.engine.begin() as connection:
            connection.execute(text(f"CREATE SCHEMA {s}"))
            connection.execute(
                text(
                    f"CREATE TABLE {s}.writes (id bigserial PRIMARY KEY,"
                    " at timestamptz NOT NULL DEFAULT clock_timestamp(),"
                    " app text NOT NULL DEFAULT current_setting('application_name'),"
                    " tbl text NOT NULL, op text NOT NULL, content jsonb)"
                )
            )
            connection.execute(
                text(
                    f"CREATE FUNCTION {s}.record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                    f" INSERT INTO {s}.writes (tbl, op, content) VALUES (TG_TABLE_NAME, TG_OP,"
                    " CASE TG_OP WHEN 'DELETE' THEN to_jsonb(OLD) WHEN 'TRUNCATE' THEN NULL"
                    " ELSE to_jsonb(NEW) END); RETURN NULL; END $$"
                )
            )
            for table in self.tables:
                name = quoted(table)
                for statement in (
                    f"CREATE TRIGGER audit_rows AFTER INSERT OR UPDATE OR DELETE ON {name}"
                    f" FOR EACH ROW EXECUTE FUNCTION {s}.record()",
                    f"CREATE TRIGGER audit_truncate AFTER TRUNCATE ON {name}"
                    f" FOR EACH STATEMENT EXECUTE FUNCTION {s}.record()",
                    f"INSERT INTO {s}.writes (tbl, op, content)"
                    f" SELECT :table, 'BASELINE', to_jsonb(r) FROM {name} AS r",
                ):
                    connection.execute(text(statement), {"table": table})

    def remove(self) -> None:
        """Drop the records, the function and, with it, every trigger."""
        self.db.execute(f"DROP SCHEMA IF EXISTS {self.SCHEMA} CASCADE")

    def writes_by(self, daemon: Daemon) -> int:
        """How many rows ``daemon`` wrote so far."""
        return int(
            self.db.scalar(
                f"SELECT count(*) FROM {self.SCHEMA}.writes WHERE app = :app",
                app=application_name(daemon.name),
            )
        )

    def late_writes(self, daemon: Daemon, epoch: int) -> list[dict[str, Any]]:
        """The rows ``daemon`` wrote after its lease of ``epoch`` expired and before it took
        the lease again (if it did): writes of a deposed leader."""
        return self.db.rows(
            f"""
            WITH lost AS (
                SELECT max((content->>'expires_at')::timestamptz) AS at
                FROM {self.SCHEMA}.writes
                WHERE tbl = 'leases' AND (content->>'epoch')::bigint = :epoch
            ), regained AS (
                SELECT min(at) AS at FROM {self.SCHEMA}.writes
                WHERE tbl = 'leases' AND app = :app AND (content->>'epoch')::bigint > :epoch
            )
            SELECT w.at, w.tbl, w.op, w.content FROM {self.SCHEMA}.writes w, lost, regained
            WHERE w.app = :app AND w.at > lost.at
              AND w.at < coalesce(regained.at, 'infinity'::timestamptz)
            ORDER BY w.id
            """,
            app=application_name(daemon.name),
            epoch=epoch,
        )

    def unrecorded(self) -> dict[str, int]:
        """Per table, how many of its rows hold content that no record holds: rows that got
        past the audit (none, or the attribution above proves nothing)."""
        missing = {}
        for table in self.tables:
            count = self.db.scalar(
                f"SELECT count(*) FROM (SELECT md5(to_jsonb(r)::text) FROM {quoted(table)} AS r"
                f" EXCEPT SELECT md5(content::text) FROM {self.SCHEMA}.writes"
                " WHERE tbl = :table) AS unseen",
                table=table,
            )
            if count:
                missing[table] = int(count)
        return missing


def quoted(identifier: str) -> str:
    """``identifier`` as a quoted SQL identifier."""
    return '"' + identifier.replace('"', '""') + '"'


@pytest.fixture
def audit(db: Db) -> Iterator[WriteAudit]:
    """The write audit, installed before any daemon starts (request it before ``daemons``)
    and removed after they were all killed."""
    recorder = WriteAudit(db)
    recorder.remove()
    recorder.install()
    yield recorder
    recorder.remove()


# -- rollouts -----------------------------------------------------------------------------------


def start_rollout(
    db: Db, workspace: Workspace, steps: list[dict[str, Any]], router: dict[str, Any] | None = None
) -> int:
    """Start a rollout of ``steps`` in ``workspace``, on its ``file`` router unless ``router``."""
    workspace.write_plan(steps)
    if router is not None:
        plan = yaml.safe_load(workspace.plan_path.read_text())
        plan["router"] = router
        workspace.plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return db.start_rollout(workspace.plan_path)


def revisions(db: Db, ids: list[int]) -> dict[int, int]:
    """Each rollout's revision: it grows with every tick that wrote the rollout."""
    rows = db.rows("SELECT id, revision FROM rollouts WHERE id = ANY(:ids)", ids=ids)
    return {row["id"]: row["revision"] for row in rows}


def stored_weight(db: Db, rollout: int) -> int:
    """The canary weight the store says the rollout's router must serve."""
    progress = db.scalar("SELECT progress FROM rollouts WHERE id = :id", id=rollout)
    return int(progress["desired"]["weight"])


def stop_like_systemd(daemon: Daemon) -> int | None:
    """``systemctl stop`` of a stopped process: SIGTERM, then SIGCONT so that it can act on
    it. Returns the exit code, or None if it still runs after :data:`WAIT` seconds."""
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.resume()
    try:
        return daemon.proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        return None


# -- property 1: no row after the lease expired --------------------------------------------------


def lead_with_rollouts(
    daemons: Daemons, db: Db, root: Path, *, idle: bool = False
) -> tuple[Daemon, Daemon, list[int]]:
    """A leader and a standby at the split-brain TTL and, unless ``idle``, rollouts that write
    every tick: two baking (gate evaluations), one stepping through weights (actions, router
    writes)."""
    leader = daemons.spawn("a", ttl=SPLIT_BRAIN_TTL)
    leader.wait_role("leader", WAIT)
    standby = daemons.spawn("b", ttl=SPLIT_BRAIN_TTL)
    standby.wait_role("standby", WAIT)
    if idle:
        return leader, standby, []
    ids = [
        start_rollout(db, Workspace(root, name), [canary(5, "1s"), canary(25, "1h")])
        for name in ("baking-1", "baking-2")
    ]
    stepping = [canary(weight, "2s") for weight in range(5, 100, 5)]
    ids.append(start_rollout(db, Workspace(root, "stepping"), stepping))
    wait_until(lambda: min(revisions(db, ids).values()) >= 4, WAIT, "the rollouts to tick")
    return leader, standby, ids


def freeze_and_take_over(
    leader: Daemon, standby: Daemon, db: Db, ids: list[int], rng: random.Random, number: int
) -> int:
    """Freeze ``leader`` at a seeded point of its renewal and tick cycle, outside its writes,
    and wait until ``standby`` leads and wrote every rollout; return the frozen lease's epoch."""
    wait_lease_renewed(db)
    time.sleep(rng.uniform(0.0, LOOP_SECONDS))
    pause_outside_writes(leader, db, rng)
    lease = db.lease()
    assert lease is not None
    assert lease["holder"].startswith(f"{leader.name}/"), lease
    at_stop = revisions(db, ids)
    if ids:
        # A command the frozen leader has not seen: the new leader applies it.
        db.command(ids[1], "resume" if number % 2 else "pause", reason=f"split brain {number}")
    standby.wait_role("leader", takeover_bound(SPLIT_BRAIN_TTL) + 5)
    wait_until(
        lambda: all(revisions(db, ids)[i] > at_stop[i] for i in ids),
        WAIT,
        "the new leader to write every rollout",
    )
    return int(lease["epoch"])


def wake(leader: Daemon) -> None:
    """SIGCONT the frozen ``leader`` and wait until its main loop found the lease lost."""
    lost = len(leader.logged("lost leadership"))
    leader.resume()
    wait_until(
        lambda: len(leader.logged("lost leadership")) > lost,
        WAIT,
        f"rolloutd {leader.name} to stand down",
    )


@pytest.mark.slow
def test_a_leader_frozen_past_its_lease_writes_no_row_after_it_expired(
    audit: WriteAudit, daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """Ten times, a leader SIGSTOPped at a seeded point of its cycle until the standby led and
    acted, then SIGCONTed, writes no row to any table after its lease expired."""
    rng = random.Random(20)
    assert {"leases", "events", "gate_evaluations", "actions", "alert_outbox"} <= set(audit.tables)
    leader, standby, ids = lead_with_rollouts(daemons, db, tmp_path)
    frozen: list[tuple[Daemon, int]] = []
    refused = 0

    for number in range(SPLIT_BRAIN_ROUNDS):
        heirs_writes = audit.writes_by(standby)
        epoch = freeze_and_take_over(leader, standby, db, ids, rng, number)
        assert audit.writes_by(standby) > heirs_writes
        abandoned = len(leader.logged("tick abandoned: not leading"))
        wake(leader)
        refused += len(leader.logged("tick abandoned: not leading")) - abandoned
        late = audit.late_writes(leader, epoch)
        assert not late, f"round {number}: {leader.name} wrote after epoch {epoch} expired: {late}"
        frozen.append((leader, epoch))
        leader, standby = standby, leader

    # Again over the whole run: until each one led again, whatever landed late.
    late_by_round = {n: audit.late_writes(d, e) for n, (d, e) in enumerate(frozen)}
    assert not any(late_by_round.values()), late_by_round
    assert audit.unrecorded() == {}
    # The woken leaders did try: ticks caught in flight by the freeze, refused by the fence.
    print(f"\nticks of woken leaders refused by the fence: {refused}")
    assert refused > 0


@pytest.mark.slow
@pytest.mark.parametrize("rollouts", ["idle", "ticking"])
def test_a_leader_stopped_while_frozen_past_its_lease_exits_and_writes_no_row_on_its_way_out(
    rollouts: str, audit: WriteAudit, daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """A leader frozen past its lease and then stopped as systemd stops it (SIGTERM, then
    SIGCONT) exits at once, without writing any row after its lease expired."""
    rng = random.Random(21)
    leader, standby, ids = lead_with_rollouts(daemons, db, tmp_path, idle=rollouts == "idle")
    epoch = freeze_and_take_over(leader, standby, db, ids, rng, 0)

    exit_code = stop_like_systemd(leader)
    late = audit.late_writes(leader, epoch)
    assert (exit_code, late) == (0, []), (
        f"exit code {exit_code} (None: still running {WAIT:g} s after SIGTERM); rows written"
        f" after epoch {epoch} expired: {late}\n{leader.log_tail(8)}"
    )
    assert audit.unrecorded() == {}


# -- property 2: a weight committed before the freeze never lands after it -------------------------


class RouterUnderTest(Protocol):
    """A router the failpoint rounds run on: a fresh one per round, read back directly."""

    ttl: float
    write_timeout: float
    rounds: int

    def spec(self, number: int) -> dict[str, Any]:
        """The plan's ``router`` section of round ``number``."""

    def canary_share(self, number: int) -> float:
        """The percentage of sessions round ``number``'s router sends to the canary."""

    def history(self, number: int) -> list[int] | None:
        """Every weight written to the router, when it keeps a history."""


class FileRouterUnderTest:
    """The ``file`` driver: a JSON file per round, and its journal of every write."""

    ttl = LEASE_TTL_SECONDS
    write_timeout = 1.0  # rolloutd.routers.filedriver.FileRouter.write_timeout
    rounds = 5

    def __init__(self, root: Path) -> None:
        self.root = root

    def spec(self, number: int) -> dict[str, Any]:
        return {"driver": "file", "path": str(round_workspace(self.root, number).router_path)}

    def canary_share(self, number: int) -> float:
        return float(round_workspace(self.root, number).router_weight() or 0)

    def history(self, number: int) -> list[int] | None:
        return round_workspace(self.root, number).journal()


class HAProxyUnderTest:
    """A real HAProxy with a backend per round: a rollout that ended keeps its router
    verified for a while, and must not meet the next round's rollout on it."""

    ttl = HAPROXY_TTL
    write_timeout = 6.0  # rolloutd.routers.haproxy.HAProxyRouter.write_timeout
    # Each round waits out a frozen 10 s lease: the rounds here cost 14 s each.
    rounds = 3

    def __init__(self, service: HAProxyService) -> None:
        self.service = service
        self.api = RuntimeAPI(str(service.socket))

    def spec(self, number: int) -> dict[str, Any]:
        return {
            "driver": "haproxy",
            "socket": str(self.service.socket),
            "backend": backend_of_round(number),
            "servers": {"stable": list(STABLE_SERVERS), "canary": list(CANARY_SERVERS)},
            "config_path": str(self.service.config),
            "state_file": str(self.service.state_file),
        }

    def canary_share(self, number: int) -> float:
        servers, _ = self.api.servers_state(backend_of_round(number))
        weights = {s.name: s.effective_weight for s in servers}
        return 100 * sum(weights[name] for name in CANARY_SERVERS) / sum(weights.values())

    def history(self, number: int) -> list[int] | None:
        return None


def round_workspace(root: Path, number: int) -> Workspace:
    """The plan, metrics and (``file`` driver) router of round ``number``."""
    return Workspace(root, f"round-{number}")


def backend_of_round(number: int) -> str:
    """The HAProxy backend of round ``number``."""
    return f"split_{number}"


@pytest.fixture
def haproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HAProxyService]:
    """A real HAProxy (the router tests' service) with one more backend for each round, all
    at 0% canary."""
    pools = Pools()
    service = HAProxyService(tmp_path_factory.mktemp("haproxy"), pools, find_binary("haproxy"))
    config = service.config.read_text()
    body = config.split(f"\nbackend {BACKEND}\n", 1)[1].split("\n\n")[0]
    assert "hash-type consistent" in body
    copies = [f"backend {backend_of_round(n)}\n{body}" for n in range(HAProxyUnderTest.rounds)]
    service.config.write_text(config + "\n" + "\n\n".join(copies) + "\n")
    service.start()
    yield service
    service.stop()
    pools.close()


def deposed_before_its_router_write(
    target: RouterUnderTest, number: int, leader: Daemon, heir: Daemon, db: Db, rollout: int
) -> None:
    """One round, from ``leader`` frozen at the failpoint for ``rollout``'s first weight on:
    ``heir`` takes over, applies the weight and rolls back; the woken leader must not move
    the router."""
    frozen_at = time.monotonic()
    # Frozen after the commit, before the write: the store has the weight, the router not.
    actions = db.rows(
        "SELECT status, payload FROM actions WHERE rollout_id = :id AND kind = 'set_weight'",
        id=rollout,
    )
    assert [(a["status"], a["payload"]["weight"]) for a in actions] == [("pending", WEIGHT)]
    assert stored_weight(db, rollout) == WEIGHT
    share = target.canary_share(number)
    assert share == 0, (
        f"round {number}: the router serves {share}% while the weight is pending: the leader"
        " did not freeze at the failpoint, before its router write, but after it"
    )

    heir.wait_serving()
    heir.wait_role("leader", takeover_bound(target.ttl) + 5)
    wait_until(lambda: target.canary_share(number) == WEIGHT, WAIT, "the new leader to apply it")
    db.command(rollout, "abort", reason=f"split brain {number}")
    wait_until(lambda: db.state(rollout) == "rolled_back", WAIT, "the rollback to end")
    assert stored_weight(db, rollout) == 0
    history = target.history(number)
    # The write's deadline, taken before the freeze, has passed when the leader wakes.
    assert time.monotonic() - frozen_at > target.write_timeout

    abandoned = len(leader.logged("tick abandoned: not leading", rollout=rollout))
    leader.resume()
    woke_at = time.monotonic()
    readings = [target.canary_share(number)]

    def watched() -> bool:
        readings.append(target.canary_share(number))
        gave_up = leader.logged("tick abandoned: not leading", rollout=rollout)
        return len(gave_up) > abandoned and time.monotonic() - woke_at >= WATCH_SECONDS

    wait_until(watched, WAIT, f"round {number}: the woken leader to give up its write")
    assert set(readings) == {0.0}, f"round {number}: the router read {readings}"
    assert target.history(number) == history
    assert "drift" not in db.event_kinds(rollout)
    assert stored_weight(db, rollout) == 0


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["file", "haproxy"])
def test_a_weight_committed_before_a_freeze_never_reaches_the_router_after_a_rollback(
    driver: str, daemons: Daemons, db: Db, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Round after round, a leader frozen after committing a weight, right before its router
    write, is deposed; the new leader applies the weight and rolls back to 0%; the woken
    leader's write never reaches the router, which reads the store's 0% all along."""
    target: RouterUnderTest = (
        FileRouterUnderTest(tmp_path)
        if driver == "file"
        else HAProxyUnderTest(request.getfixturevalue("haproxy"))
    )
    # ``stop`` freezes it at each of its router writes: here, the first of each round.
    leader = start_with_failpoints(daemons, "armed", "before_router_write=stop", ttl=target.ttl)
    leader.wait_serving()
    leader.wait_role("leader", WAIT)

    for number in range(target.rounds):
        steps = [canary(WEIGHT, "1h", gates=())]
        workspace = round_workspace(tmp_path, number)
        rollout = start_rollout(db, workspace, steps, router=target.spec(number))
        # The armed daemon leads (again: the last round's heir released the lease on SIGTERM),
        # starts the rollout and freezes; only then may a standby start.
        wait_frozen(leader)
        heir = daemons.start(f"heir-{number}", ttl=target.ttl)
        deposed_before_its_router_write(target, number, leader, heir, db, rollout)
        assert heir.terminate() == 0


# -- property 3: the file router's journal is written only under a live lease ----------------------

JOURNAL_ROUNDS = 3


def journal_lines(workspace: Workspace) -> list[dict[str, Any]]:
    """Every line of the round's router journal, as written."""
    if not workspace.journal_path.exists():
        return []
    text = workspace.journal_path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_a_leader_frozen_before_its_journal_line_appends_nothing_after_the_rollback(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """Round after round, a leader frozen after its weight landed in the router file and
    before its journal line is deposed; the new leader journals what landed, under the frozen
    leader's epoch, and rolls back to 0%; the woken leader appends nothing after the 0%, and
    the journal's lines are in epoch order."""
    target = FileRouterUnderTest(tmp_path)
    leader = start_with_failpoints(daemons, "armed", "before_journal=stop", ttl=target.ttl)
    leader.wait_serving()
    leader.wait_role("leader", WAIT)
    for number in range(JOURNAL_ROUNDS):
        workspace = round_workspace(tmp_path, number)
        steps = [canary(WEIGHT, "1h", gates=())]
        rollout = start_rollout(db, workspace, steps, router=target.spec(number))
        wait_frozen(leader)
        heir = daemons.start(f"heir-{number}", ttl=target.ttl)
        deposed_before_its_journal_line(target, number, leader, heir, db, rollout)
        assert heir.terminate() == 0


def deposed_before_its_journal_line(
    target: FileRouterUnderTest, number: int, leader: Daemon, heir: Daemon, db: Db, rollout: int
) -> None:
    """One round, from ``leader`` frozen between the rename of ``rollout``'s first weight and
    its journal line on: ``heir`` takes over and rolls back; the woken leader must append
    nothing."""
    frozen_at = time.monotonic()
    workspace = round_workspace(target.root, number)
    # The weight landed in the file, and its journal line is not written yet.
    assert (workspace.router_weight(), journal_lines(workspace)) == (WEIGHT, [])
    heir.wait_serving()
    heir.wait_role("leader", takeover_bound(target.ttl) + 5)
    db.command(rollout, "abort", reason=f"journal split brain {number}")
    wait_until(lambda: db.state(rollout) == "rolled_back", WAIT, "the rollback to end")
    written = journal_lines(workspace)
    assert [line["canary_weight"] for line in written] == [WEIGHT, 0], written
    # The frozen write's deadline passes while it sleeps.
    time.sleep(max(0.0, target.write_timeout - (time.monotonic() - frozen_at)))

    abandoned = len(leader.logged("tick abandoned: not leading", rollout=rollout))
    leader.resume()
    wait_until(
        lambda: len(leader.logged("tick abandoned: not leading", rollout=rollout)) > abandoned,
        WAIT,
        f"round {number}: the woken leader to give up its journal line",
    )
    lines = journal_lines(workspace)
    assert lines == written, f"round {number}: the woken leader appended {lines[len(written) :]}"
    epochs = [line["epoch"] for line in lines]
    assert all(isinstance(e, int) for e in epochs), epochs
    assert epochs == sorted(epochs) and epochs[0] < epochs[-1], epochs
    assert workspace.router_weight() == 0
