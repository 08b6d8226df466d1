"""Two daemons on one Postgres: one leads, the other takes over, and a deposed leader is fenced.

The daemons run with a 3 s lease TTL (production default 15 s) so takeovers happen in test time.
"""

from __future__ import annotations

import errno
import json
import os
import random
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from .helpers import (
    FULL,
    LEASE_TTL_SECONDS,
    PAUSE,
    TAKEOVER_BOUND,
    WAIT,
    Daemon,
    Daemons,
    Db,
    WaitTimeout,
    assert_within,
    canary,
    start_rollout_in,
    wait_lease_renewed,
    wait_until,
)

pytestmark = pytest.mark.postgres


def start_rollouts(db: Db, root: Path, names: list[str], steps: list[dict[str, Any]]) -> list[int]:
    """Start one rollout of ``steps`` per name, each with its own router and metrics files."""
    return [start_rollout_in(db, root, name, steps)[1] for name in names]


def one_leader(first: Daemon, second: Daemon) -> tuple[Daemon, Daemon] | None:
    """(leader, standby) once exactly one of the two leads and the other answers standby."""
    roles = (first.role(), second.role())
    if roles == ("leader", "standby"):
        return first, second
    if roles == ("standby", "leader"):
        return second, first
    return None


def revisions(db: Db, ids: list[int]) -> dict[int, int]:
    """Each rollout's revision: it grows by one with every tick that wrote the rollout."""
    rows = db.rows("SELECT id, revision FROM rollouts WHERE id = ANY(:ids)", ids=ids)
    return {row["id"]: row["revision"] for row in rows}


def three_ticking(db: Db, root: Path, steps: list[dict[str, Any]], revision: int) -> list[int]:
    """Start rollouts one, two and three of ``steps``; return their ids once every one of
    them has ticked up to ``revision``."""
    ids = start_rollouts(db, root, ["one", "two", "three"], steps)
    wait_until(
        lambda: all(r >= revision for r in revisions(db, ids).values()),
        15,
        "the rollouts to tick",
    )
    return ids


def test_two_daemons_elect_one_leader_and_only_the_leader_acts(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """Of two daemons started together exactly one leads, and only its name is on the events."""
    first, second = daemons.start("a"), daemons.start("b")
    first.wait_serving()
    second.wait_serving()
    (rollout,) = start_rollouts(db, tmp_path, ["one"], [canary(5, "1s"), canary(25, "1s"), PAUSE])

    leader, standby = wait_until(lambda: one_leader(first, second), 10, "exactly one leader")
    samples: list[tuple[str | None, str | None]] = []

    def awaiting() -> bool:
        samples.append((leader.role(), standby.role()))
        return db.state(rollout) == "awaiting_promotion"

    wait_until(awaiting, 2 * WAIT, "the rollout to reach its pause step", interval=0.1)

    # None: no answer within 1 s (a busy host), which says nothing about leadership.
    assert {s[0] for s in samples} <= {"leader", None}, samples
    assert {s[1] for s in samples} <= {"standby", None}, samples
    assert ("leader", "standby") in samples
    daemon_actors = {e["actor"] for e in db.events(rollout) if e["actor"].startswith("rolloutd@")}
    assert daemon_actors == {leader.actor}
    assert {(e["kind"], e["actor"]) for e in db.events(None)} == {("leader_acquired", leader.actor)}
    assert leader.logged("tick")
    assert not standby.logged("tick")
    assert not standby.logged("alert")


@pytest.mark.slow
def test_standby_leads_within_the_ttl_after_the_leader_is_killed(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """After kill -9 of the leader the standby leads within TTL + one loop, and finishes the job."""
    old, heir = daemons.leader_and_standby()
    workspace, rollout = start_rollout_in(
        db, tmp_path, "one", [canary(5, "1s"), canary(25, "1s"), PAUSE, FULL]
    )
    wait_until(lambda: workspace.router_weight() == 5, WAIT, "the leader to set 5%")
    old_epoch = old.wait_role("leader", WAIT)["epoch"]

    old.kill()
    killed_at = time.monotonic()
    dead_lease = db.lease()
    new_epoch = heir.wait_role("leader", TAKEOVER_BOUND + 5)["epoch"]
    takeover = time.monotonic() - killed_at

    print(f"\ntakeover after kill -9: {takeover:.2f} s (lease TTL {LEASE_TTL_SECONDS:g} s)")
    assert takeover <= TAKEOVER_BOUND
    assert new_epoch > old_epoch
    # It waited for the dead leader's lease to expire rather than taking over a live one.
    assert dead_lease is not None
    assert dead_lease["holder"].startswith("a/")
    (acquired,) = wait_until(
        lambda: [e["at"] for e in db.events(None) if e["actor"] == heir.actor],
        WAIT,
        "the new leader's leader_acquired event",  # /healthz may answer just before the commit
    )
    assert acquired >= dead_lease["expires_at"]

    wait_until(lambda: db.state(rollout) == "awaiting_promotion", WAIT, "the pause step")
    db.command(rollout, "promote")
    wait_until(lambda: db.state(rollout) == "completed", WAIT, "the rollout to complete")
    assert workspace.router_weight() == 100
    taken = next(e["id"] for e in db.events(None) if e["actor"] == heir.actor)
    assert {e["actor"] for e in db.events(rollout) if e["id"] > taken} <= {heir.actor, "tester"}


SNAPSHOT = {
    "rollouts": "SELECT id, revision, state, updated_at FROM rollouts ORDER BY id",
    "events": "SELECT count(*) AS n, max(id) AS last FROM events",
    "gate_evaluations": "SELECT count(*) AS n, max(id) AS last FROM gate_evaluations",
    "actions": "SELECT id, status, attempts FROM actions ORDER BY id",
    "commands": "SELECT id, status FROM commands ORDER BY id",
    "step_progress": "SELECT rollout_id, step_index, entered_at, verified_at, completed_at"
    " FROM step_progress ORDER BY rollout_id, step_index",
    "lease": "SELECT holder, epoch, expires_at FROM leases",
}


def snapshot(db: Db) -> dict[str, Any]:
    """Everything a leader writes to the database, in one consistent read.

    The router files are left out: a leader frozen at the wrong point of a tick may still
    write to them once resumed (test_a_leader_frozen_mid_tick_does_not_touch_the_router).
    """
    with db.engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection:
        return {
            name: [dict(row._mapping) for row in connection.execute(text(sql))]
            for name, sql in SNAPSHOT.items()
        }


def pause_outside_transactions(daemon: Daemon, db: Db, rng: random.Random) -> None:
    """SIGSTOP ``daemon`` at a moment when it holds no lock on the lease row.

    A leader frozen *inside* a write transaction keeps the lease row locked and blocks the
    takeover: see test_a_leader_frozen_inside_a_write_does_not_block_the_takeover.
    """
    for _ in range(500):
        daemon.pause()
        if not db.holds_lease_lock(daemon.name):
            return
        daemon.resume()
        time.sleep(rng.uniform(0.005, 0.05))
    raise AssertionError(f"rolloutd {daemon.name} always held the lease lock")


@pytest.mark.slow
def test_a_leader_resumed_after_losing_its_lease_writes_nothing_and_steps_down(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """A leader SIGSTOPped past its TTL and then SIGCONTed writes nothing and reports standby."""
    rng = random.Random(3)
    old, heir = daemons.leader_and_standby()
    ids = three_ticking(db, tmp_path, [canary(5, "1s"), canary(25, "1h")], revision=4)
    time.sleep(rng.uniform(0.0, 0.2))  # stop at a seeded point of the tick cycle

    pause_outside_transactions(old, db, rng)
    stopped_at = time.monotonic()
    at_stop = revisions(db, ids)
    last_event_at_stop = db.scalar("SELECT max(id) FROM events")
    new_epoch = heir.wait_role("leader", TAKEOVER_BOUND + 5)["epoch"]
    print(f"\ntakeover after SIGSTOP: {time.monotonic() - stopped_at:.2f} s")
    wait_until(
        lambda: all(revisions(db, ids)[i] > at_stop[i] for i in ids),
        WAIT,
        "the new leader to write every rollout",
    )

    # Stop the new leader too, by kill -9 so that nothing of it stays locked or in flight, just
    # after it renewed its lease. The lease stays live until it expires: until then nobody may
    # write, least of all the old leader.
    wait_lease_renewed(db)
    heir.kill()
    lease = db.lease()
    assert lease is not None
    assert lease["epoch"] == new_epoch
    # Watch until shortly before the lease expires (the old leader may lead after that).
    window = (lease["expires_at"] - datetime.now(UTC)).total_seconds() - 0.5
    assert window > 1.0, f"only {window:.2f} s of the new leader's lease left to watch"
    watch_until = time.monotonic() + window
    before = snapshot(db)
    old.resume()
    old.wait_role("standby", window)
    roles = []
    while time.monotonic() < watch_until:
        role = old.role()
        if time.monotonic() < watch_until:
            roles.append(role)
        time.sleep(0.05)
    after = snapshot(db)

    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, f"the resumed old leader wrote {changed}: {before} -> {after}"
    assert set(roles) <= {"standby", None}, roles
    assert old.logged("lost leadership")
    late = db.rows(
        "SELECT kind, actor FROM events WHERE id > :last AND actor = :actor",
        last=last_event_at_stop,
        actor=old.actor,
    )
    assert late == []
    # Which fence stopped them: the in-process lease check, or the database's (a tick that
    # was already past the first when the process froze).
    abandoned = Counter(line["error"] for line in old.logged("tick abandoned: not leading"))
    print(f"ticks the old leader abandoned after SIGCONT: {dict(abandoned)}")

    # Once the dead leader's lease has run out, the old one may lead again, with a new epoch.
    assert old.wait_role("leader", WAIT)["epoch"] > new_epoch


@pytest.mark.slow
def test_a_leader_frozen_inside_a_write_does_not_block_the_takeover(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """A leader SIGSTOPped in the middle of a write transaction still loses the lease in time."""
    rng = random.Random(4)
    old, heir = daemons.leader_and_standby()
    three_ticking(db, tmp_path, [canary(5, "1h")], revision=2)

    for _ in range(2000):
        old.pause()
        if db.holds_lease_lock(old.name):
            break
        old.resume()
        time.sleep(rng.uniform(0.0, 0.02))
    else:
        raise WaitTimeout("never caught the leader inside a write transaction")

    try:
        heir.wait_role("leader", TAKEOVER_BOUND)
    except WaitTimeout as exc:
        backends = db.rows(
            "SELECT application_name AS app, state, wait_event_type, wait_event,"
            " left(query, 70) AS query FROM pg_stat_activity"
            " WHERE application_name LIKE 'rolloutd-%' ORDER BY application_name"
        )
        raise AssertionError(f"{exc}; the daemons' backends: {backends}") from None


def test_a_lease_too_short_to_act_on_is_refused_or_acted_on(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """A 2 s lease either is refused at start-up or leaves the leader able to act."""
    daemon = daemons.start("a", ttl=2.0)
    (rollout,) = start_rollouts(db, tmp_path, ["short"], [canary(5, "1h")])
    wait_until(lambda: daemon.logged("starting") or not daemon.alive, WAIT, "the daemon to start")

    def refused_or_acting() -> bool:
        if not daemon.alive:
            return True
        return db.state(rollout) != "pending"

    assert_within(refused_or_acting, 10, "the daemon to refuse the TTL or to start the rollout")
    if not daemon.alive:
        assert daemon.proc.returncode == 2
        assert "ROLLOUTD_LEASE_TTL_SECONDS" in daemon.log_tail()


def fifo_writer(path: Path) -> int | None:
    """A write end of the FIFO at ``path`` once somebody opens it to read, else None."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


@pytest.mark.slow
def test_a_leader_frozen_mid_tick_does_not_touch_the_router_after_resuming(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """A leader frozen between its router read-back and its drift check writes no weight later."""
    old, heir = daemons.leader_and_standby()
    steps = [canary(5, "3s", gates=()), canary(25, "1h", gates=())]
    workspace, rollout = start_rollout_in(db, tmp_path, "one", steps)
    wait_until(
        lambda: "weight_verified" in db.event_kinds(rollout),
        WAIT,
        "the leader to verify 5%",
    )

    # Park the leader's next tick at a known point: its router read-back opens a FIFO and
    # waits for a writer; meanwhile the intent log is locked, so that once the read-back
    # returns, the drift check (past its lease check) waits for the database.
    fifo = workspace.dir / "fifo"
    os.mkfifo(fifo)
    os.replace(fifo, workspace.router_path)
    writer = wait_until(
        lambda: fifo_writer(workspace.router_path), WAIT, "the tick to read the router back"
    )
    document = json.dumps({"canary_weight": 5, "stable_weight": 95, "mirror": False})
    with psycopg.connect(db.url) as lock:
        lock.execute("SET lock_timeout = '10s'")
        lock.execute("LOCK TABLE actions IN ACCESS EXCLUSIVE MODE")
        os.write(writer, document.encode())
        os.close(writer)
        (workspace.dir / "weights.tmp").write_text(document)
        os.replace(workspace.dir / "weights.tmp", workspace.router_path)
        wait_until(
            lambda: db.scalar(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'rolloutd-a' AND wait_event_type = 'Lock'"
            ),
            WAIT,
            "the drift check to wait for the intent log",
        )
        old.pause()
        lock.rollback()

    # The standby takes over and moves the rollout on to 25%.
    heir.wait_role("leader", TAKEOVER_BOUND + 5)
    wait_until(lambda: workspace.router_weight() == 25, WAIT, "the new leader to set 25%")
    wait_until(lambda: not db.pending_actions(rollout), WAIT, "the 25% action to be done")
    wait_lease_renewed(db)
    heir.kill()
    journal = workspace.journal()

    def given_up() -> int:
        # The parked tick either finds the lease gone, or its lock wait timed out (1 s
        # lock_timeout on the daemon's sessions) and the tick failed: both write nothing.
        return len(old.logged("tick abandoned: not leading")) + len(old.logged("tick failed"))

    abandoned = given_up()
    old.resume()

    wait_until(lambda: given_up() > abandoned, WAIT, "the resumed tick to give up")
    assert not old.logged("router drift")
    assert workspace.journal() == journal
