"""The leader lease: one holder at a time, takeover after expiry, and fencing by epoch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import OperationalError, PendingRollbackError

from rolloutd.store import lease
from rolloutd.store.models import Lease
from tests.store.locks import wait_for_lock_wait

if TYPE_CHECKING:
    from conftest import StoreHandle
    from sqlalchemy.orm import Session

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TTL = timedelta(seconds=15)


def _acquire(store: StoreHandle, holder: str, now: datetime) -> lease.Held | None:
    with store.sessions.begin() as session:
        return lease.acquire(session, holder=holder, ttl=TTL, now=now)


@contextmanager
def _writing(store: StoreHandle) -> Iterator[tuple[lease.Held, Session, datetime]]:
    """Leader ``a``'s lease, and a write transaction of its holding the row (FOR KEY SHARE),
    open for the block; it is committed (or found ended) and closed after it."""
    now = datetime.now(UTC)
    with store.sessions.begin() as session:
        held = lease.acquire(session, holder="a", ttl=TTL, now=now)
    assert held is not None
    writing = store.sessions()
    writing.begin()
    assert lease.hold_for_write(writing, held, now=now)
    try:
        yield held, writing, now
    finally:
        with suppress(OperationalError, PendingRollbackError):
            writing.commit()
        writing.close()


def test_only_one_holder_at_a_time(store: StoreHandle) -> None:
    """While a lease is live, a second holder cannot take it."""
    first = _acquire(store, "a", T0)
    assert first is not None and first.epoch == 1
    assert _acquire(store, "b", T0 + timedelta(seconds=14)) is None


def test_an_expired_lease_is_taken_over_with_a_new_epoch(store: StoreHandle) -> None:
    """After the TTL, a standby takes the lease and the epoch grows."""
    first = _acquire(store, "a", T0)
    second = _acquire(store, "b", T0 + TTL)
    assert first is not None and second is not None
    assert second.epoch == first.epoch + 1


def test_renewal_extends_and_fails_once_lost(store: StoreHandle) -> None:
    """A holder renews before expiry; after a takeover its renewal fails."""
    held = _acquire(store, "a", T0)
    assert held is not None
    with store.sessions.begin() as session:
        renewed = lease.renew(session, held, ttl=TTL, now=T0 + timedelta(seconds=10))
    assert renewed is not None and renewed.expires_at == T0 + timedelta(seconds=25)
    assert _acquire(store, "b", T0 + timedelta(seconds=20)) is None
    assert _acquire(store, "b", T0 + timedelta(seconds=25)) is not None
    with store.sessions.begin() as session:
        assert lease.renew(session, renewed, ttl=TTL, now=T0 + timedelta(seconds=26)) is None


def test_release_lets_a_standby_lead_at_once(store: StoreHandle) -> None:
    """A released lease is free immediately, not after the TTL."""
    held = _acquire(store, "a", T0)
    assert held is not None
    with store.sessions.begin() as session:
        lease.release(session, held, now=T0 + timedelta(seconds=1))
    assert _acquire(store, "b", T0 + timedelta(seconds=1)) is not None


def test_reacquiring_our_own_lease_bumps_the_epoch(store: StoreHandle) -> None:
    """A holder that dropped its lease after a database error takes it back under a new epoch."""
    held = _acquire(store, "a", T0)
    again = _acquire(store, "a", T0 + timedelta(seconds=1))
    assert held is not None and again is not None
    assert again.epoch == held.epoch + 1


def test_the_fence_holds_only_for_the_live_epoch(store: StoreHandle) -> None:
    """Writes fenced with an old epoch or past expiry match nothing."""
    old = _acquire(store, "a", T0)
    assert old is not None
    new = _acquire(store, "b", T0 + TTL)
    assert new is not None
    at = T0 + TTL + timedelta(seconds=1)
    with store.sessions() as session:
        assert session.scalar(select(lease.fence(new, now=at))) is True
        assert session.scalar(select(lease.fence(old, now=at))) is False
        assert session.scalar(select(lease.fence(new, now=at + TTL))) is False
        assert lease.hold_for_write(session, new, now=at) is True
        assert lease.hold_for_write(session, old, now=at) is False


@pytest.mark.postgres
def test_a_takeover_waits_for_the_leaders_write_in_flight(pg_store: StoreHandle) -> None:
    """On Postgres the leader's write transaction blocks a takeover until it commits."""
    now = datetime.now(UTC)
    with pg_store.sessions.begin() as session:
        held = lease.acquire(session, holder="a", ttl=TTL, now=now)
    assert held is not None
    taken: list[lease.Held | None] = []
    writing = pg_store.sessions()
    writing.begin()
    assert lease.hold_for_write(writing, held, now=now)

    def take_over() -> None:
        with pg_store.sessions.begin() as session:
            # Force expiry so that only the row lock stands between b and the lease.
            taken.append(lease.acquire(session, holder="b", ttl=TTL, now=now + TTL))

    thread = threading.Thread(target=take_over)
    thread.start()
    wait_for_lock_wait(pg_store, "the takeover")
    assert taken == []  # blocked on the leader's FOR KEY SHARE lock
    writing.commit()
    writing.close()
    thread.join(timeout=10)
    assert taken and taken[0] is not None and taken[0].epoch == held.epoch + 1
    with pg_store.sessions() as session:
        row = session.scalar(select(Lease))
        assert row is not None and row.holder == "b"
        session.execute(update(Lease).values(expires_at=now))


@pytest.mark.postgres
def test_a_renewal_does_not_wait_for_the_leaders_write_in_flight(pg_store: StoreHandle) -> None:
    """The renewal moves only the expiry, which is no key: it passes the leader's own write
    lock at once, where a renewal that waited on it lost the lease under write load."""
    with _writing(pg_store) as (held, _, now):
        with pg_store.sessions.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '200ms'"))
            renewed = lease.renew(session, held, ttl=TTL, now=now + timedelta(seconds=5))
        assert renewed is not None and renewed.epoch == held.epoch


@pytest.mark.postgres
def test_a_leader_frozen_in_a_write_past_its_lease_is_ended_so_the_takeover_proceeds(
    pg_store: StoreHandle,
) -> None:
    """The leader's write transaction holds the row past the lease's expiry (as a leader
    frozen halfway through a pipeline of statements does, which no Postgres timeout ends):
    the standby's takeover times out on the lock, ends that session, and takes the lease;
    the leader's transaction is rolled back, and nothing is ended while the lease is live."""
    with _writing(pg_store) as (held, writing, now):
        with pg_store.sessions.begin() as session:
            assert lease.end_stale_holders(session, now=now) == []  # live: not stale
        with pytest.raises(OperationalError), pg_store.sessions.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '200ms'"))
            lease.acquire(session, holder="b", ttl=TTL, now=now + TTL)
        with pg_store.sessions.begin() as session:
            ended = lease.end_stale_holders(session, now=now + TTL)
        assert len(ended) == 1
        with pg_store.sessions.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '5s'"))
            taken = lease.acquire(session, holder="b", ttl=TTL, now=now + TTL)
        assert taken is not None and taken.epoch == held.epoch + 1
        with pytest.raises(OperationalError):
            writing.execute(text("SELECT 1"))  # its session was ended
