"""A leader's own writes never cost it the lease.

Every leader write locks the lease row first, so a takeover (which changes the epoch) waits
for writes in flight. The renewal changes only the expiry: it must not wait for those writes,
and one that waits on a lock for longer than the daemon's 1 s lock timeout retries until its
own lease would expire instead of standing down (standing down bumps the epoch, aborts ticks
in flight and replays actions).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from rolloutd.store import lease
from rolloutd.store.db import transaction

from .helpers import WAIT, Daemons, Db, wait_lease_renewed

pytestmark = pytest.mark.postgres

LOCK_TIMEOUT_S = 1.0  # the daemon's sessions' lock_timeout (rolloutd/store/db.py)
# Long enough that a renewal retried past a 1 s lock timeout still has lease left.
LEASE_TTL_SECONDS = 6.0


def _held(db: Db) -> lease.Held:
    row = db.rows("SELECT holder, epoch, expires_at FROM leases WHERE name = 'leader'")[0]
    return lease.Held("leader", row["holder"], row["epoch"], row["expires_at"])


def test_a_leaders_own_write_held_for_three_lock_timeouts_does_not_demote_it(
    daemons: Daemons, db: Db
) -> None:
    """A write transaction of the leader's epoch holds the lease row as every leader write
    does, for 3 s: the leader renews through it, keeps leading, its epoch unchanged."""
    leader = daemons.spawn("a")
    epoch = leader.wait_role("leader", WAIT)["epoch"]
    held = _held(db)
    with transaction(db.sessions) as session:
        assert lease.hold_for_write(session, held, now=datetime.now(UTC))
        time.sleep(3 * LOCK_TIMEOUT_S)
    wait_lease_renewed(db)  # past the write: the leader has gone on since
    health = leader.health()
    assert health is not None and health[1]["role"] == "leader", leader.log_tail()
    assert health[1]["epoch"] == epoch
    assert db.scalar("SELECT epoch FROM leases WHERE name = 'leader'") == epoch
    assert not leader.logged("lost leadership"), leader.log_tail()


def test_a_renewal_that_waits_out_a_lock_timeout_retries_instead_of_standing_down(
    daemons: Daemons, db: Db
) -> None:
    """Another transaction locks the lease row exclusively for 2.5 s (two lock timeouts,
    well inside the 6 s lease): the renewal times out, retries, and the leader keeps its
    epoch."""
    leader = daemons.spawn("a")
    epoch = leader.wait_role("leader", WAIT)["epoch"]
    with db.engine.begin() as connection:
        connection.execute(text("SELECT 1 FROM leases WHERE name = 'leader' FOR UPDATE"))
        time.sleep(2.5)
    wait_lease_renewed(db)  # past the lock: the retried renewal got through
    health = leader.health()
    assert health is not None and health[1]["role"] == "leader", leader.log_tail()
    assert health[1]["epoch"] == epoch
    assert not leader.logged("lost leadership"), leader.log_tail()
    assert leader.logged("lease renewal waited on a lock; retrying"), leader.log_tail()
