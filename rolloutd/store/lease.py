"""The leader lease: acquire, renew, release, and the fence every leader write carries.

A lease row holds the holder's name, an expiry and an epoch (fencing token). Taking over
an expired lease bumps the epoch. Times are the writer's clock: hosts are NTP-synced to
milliseconds, far inside a 15 s lease, and using the caller's ``now`` keeps the store
free of clock reads so tests can drive time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

from sqlalchemy import ColumnElement, and_, exists, or_, select, text, update
from sqlalchemy.orm import Session

from rolloutd.store.models import Lease
from rolloutd.store.reads import LEADER_LEASE
from rolloutd.store.upserts import insert_on_conflict
from rolloutd.store.writes import rowcount

LEADER = LEADER_LEASE

Fence: TypeAlias = ColumnElement[bool]
"""A condition a leader ANDs into the WHERE clause of its writes (see :func:`fence`)."""

_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Held:
    """A lease this process holds: who, which epoch, until when."""

    name: str
    holder: str
    epoch: int
    expires_at: datetime

    def valid_at(self, now: datetime, *, margin: timedelta = timedelta(0)) -> bool:
        """Whether the lease is still ours at ``now`` with ``margin`` to spare."""
        return now + margin < self.expires_at


def acquire(
    session: Session, *, holder: str, ttl: timedelta, now: datetime, name: str = LEADER
) -> Held | None:
    """Take the lease if it is free, expired, or already ours; None when another holder has it.

    Taking it always bumps the epoch, even from ourselves (after a database error made us
    drop it), so writes still in flight under the old epoch are fenced off.
    """
    session.execute(
        insert_on_conflict(session, Lease)
        .values(name=name, holder="", epoch=0, expires_at=_NEVER, renewed_at=_NEVER)
        .on_conflict_do_nothing()
    )
    taken = rowcount(
        session.execute(
            update(Lease)
            .where(Lease.name == name, or_(Lease.expires_at <= now, Lease.holder == holder))
            .values(holder=holder, epoch=Lease.epoch + 1, expires_at=now + ttl, renewed_at=now)
        )
    )
    if taken != 1:
        return None
    epoch = session.scalar(select(Lease.epoch).where(Lease.name == name))
    assert epoch is not None
    return Held(name, holder, epoch, now + ttl)


def renew(session: Session, held: Held, *, ttl: timedelta, now: datetime) -> Held | None:
    """Extend a lease we hold; None when it was lost (expired, or taken over)."""
    renewed = rowcount(
        session.execute(
            update(Lease).where(_live(held, now)).values(expires_at=now + ttl, renewed_at=now)
        )
    )
    return Held(held.name, held.holder, held.epoch, now + ttl) if renewed == 1 else None


def release(session: Session, held: Held, *, now: datetime) -> bool:
    """Give the lease up at once, so a standby need not wait for it to expire.

    :returns: whether it was still ours to give up (held, and not expired).
    """
    result = session.execute(update(Lease).where(_live(held, now)).values(expires_at=now))
    return rowcount(result) == 1


def end_stale_holders(session: Session, *, now: datetime, name: str = LEADER) -> list[int]:
    """End the Postgres sessions whose transactions still lock the lease row after it
    expired; returns their process ids (none on SQLite, or while the lease is live).

    A leader frozen inside a write transaction (SIGSTOP, a stalled VM) keeps its FOR KEY
    SHARE lock on the row, and a standby's takeover waits on it. Postgres ends such a
    session by itself only when it is idle in its transaction; frozen halfway through a
    pipeline of statements it is *active*, waiting for the rest, and no timeout applies.
    Its lease has expired, so nothing it would still write may land: ending its session
    rolls its transaction back, which is exactly what the fence promises.
    """
    bind = session.get_bind()
    if bind.dialect.name != "postgresql":
        return []
    expires_at = session.scalar(select(Lease.expires_at).where(Lease.name == name))
    if expires_at is None or expires_at > now:
        return []
    # FOR KEY SHARE holds a RowShareLock on the table for the rest of its transaction; a
    # takeover or a renewal (UPDATE) holds RowExclusiveLock and is no leader's write.
    holders = session.scalars(
        text(
            "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'relation'"
            " AND relation = CAST(:table AS regclass) AND mode = 'RowShareLock' AND granted"
            " AND pid <> pg_backend_pid()"
        ),
        {"table": Lease.__tablename__},
    ).all()
    return [
        pid
        for pid in holders
        if session.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    ]


def fence(held: Held, *, now: datetime) -> Fence:
    """A condition that is true only while ``held`` is still the live lease."""
    return exists().where(_live(held, now))


def hold_for_write(session: Session, held: Held, *, now: datetime) -> bool:
    """Lock our lease row against takeover until this transaction ends; False if it is lost.

    Every leader write transaction starts here. On Postgres the row is locked FOR KEY
    SHARE: the epoch is a key (a unique index on name and epoch), so a standby's takeover
    UPDATE, which bumps it, waits until our transaction commits, and our writes land while we
    are provably the leader; our own renewal, which moves only the expiry, takes FOR NO KEY
    UPDATE and does not wait for them. SQLite has one instance and no row locks.
    """
    query = select(Lease.epoch).where(_live(held, now)).with_for_update(read=True, key_share=True)
    return session.scalar(query) is not None


def _live(held: Held, now: datetime) -> ColumnElement[bool]:
    """Whether ``held`` still names the lease's holder and epoch, and has not expired."""
    return and_(
        Lease.name == held.name,
        Lease.holder == held.holder,
        Lease.epoch == held.epoch,
        Lease.expires_at > now,
    )
