"""The leader lease as one process holds it: renewed or taken on every turn of the main loop,
released on the way out.

Our own writes hold the lease row FOR KEY SHARE, which a renewal does not wait for; a renewal
that still waits out the lock timeout (a takeover attempt, an operator's query) tries again
until our lease would expire, since standing down bumps the epoch, aborts the ticks in flight
and replays every action. On any other database error the leader stands down first.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import structlog

from rolloutd.alerts.enqueue import enqueue_leadership_alert
from rolloutd.errors import RolloutdError
from rolloutd.reconcile import LEASE_MARGIN
from rolloutd.store import lease, queries
from rolloutd.store.db import lock_timed_out, transaction
from rolloutd.store.errors import StoreError

if TYPE_CHECKING:
    from rolloutd.store.types import Session, Sessions

log = structlog.get_logger("rolloutd.daemon")

Change = Literal["gained", "lost"]


def daemon_event(
    session: Session,
    instance: str,
    kind: str,
    detail: str,
    now: datetime,
    *,
    data: dict[str, Any] | None = None,
    dedup_key: str | None = None,
) -> None:
    """Append an event of the process itself (no rollout), signed by ``instance``."""
    queries.append_event(
        session,
        rollout_id=None,
        kind=kind,
        actor=f"rolloutd@{instance}",
        detail=detail,
        data=data,
        now=now,
        dedup_key=dedup_key,
    )


class Leadership:
    """This process's hold on the leader lease (``held``: None while it stands by)."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        instance: str,
        ttl: timedelta,
        wall: Callable[[], datetime],
        stopping: threading.Event,
    ) -> None:
        self.sessions = sessions
        self.instance = instance
        self.holder = f"{instance}/{uuid.uuid4().hex[:8]}"
        self.ttl = ttl
        self.wall = wall
        self.stopping = stopping
        self.held: lease.Held | None = None

    def epoch(self) -> int | None:
        """The epoch we lead with, or None when the lease is not ours right now."""
        held = self.held
        return held.epoch if held is not None and held.valid_at(self.wall()) else None

    def turn(self) -> Change | None:
        """Renew the lease, or try to take it; whether leadership was gained or lost."""
        was_leading = self.held is not None
        try:
            self.held = self.renew_or_acquire(was_leading)
        except (RolloutdError, StoreError) as exc:
            # Demote first: a leader that cannot reach the database must not act on stale facts.
            if self.held is not None:
                log.error("database error; standing down", error=str(exc))
            self.held = None
        if self.held is not None and not was_leading:
            log.info("leading", epoch=self.held.epoch, instance=self.instance)
            return "gained"
        if self.held is None and was_leading:
            log.warning("lost leadership", instance=self.instance)
            return "lost"
        return None

    def keep(self) -> None:
        """Renew while stopping (the ticks in flight still write under the lease)."""
        if self.held is None:
            return
        try:
            self.held = self.renew_or_acquire(was_leading=True)
        except (RolloutdError, StoreError) as exc:
            log.error("database error while draining; the lease expires by itself", error=str(exc))
            self.held = None
        if self.held is None:
            log.warning("lost leadership while draining ticks", instance=self.instance)

    def renew_or_acquire(self, was_leading: bool) -> lease.Held | None:
        """Renew the lease we hold, or try to take it; the new lease is ours only once the
        transaction has committed.

        :raises RolloutdError: the database cannot be reached.
        :raises StoreError: any other database error, or a lock held past our lease.
        """
        ended_stale = False
        while True:
            now = self.wall()
            try:
                with transaction(self.sessions) as session:
                    if self.held is not None:
                        held = lease.renew(session, self.held, ttl=self.ttl, now=now)
                    else:
                        held = lease.acquire(session, holder=self.holder, ttl=self.ttl, now=now)
                    if held is not None and not was_leading:
                        self._announce(
                            session, "acquired", held, f"leading with epoch {held.epoch}", now
                        )
                return held
            except StoreError as exc:
                current = self.held
                if current is None and lock_timed_out(exc) and not ended_stale:
                    ended_stale = self._end_stale_holders()
                    if ended_stale:
                        continue  # the expired leader's transaction is gone: take the lease
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

    def _end_stale_holders(self) -> bool:
        """After a takeover waited on a lock: end the sessions of a leader whose lease expired
        while its write transaction held the row (see :func:`lease.end_stale_holders`);
        whether any was ended."""
        with transaction(self.sessions) as session:
            ended = lease.end_stale_holders(session, now=self.wall())
        if ended:
            log.warning(
                "ended the database sessions of a leader whose lease expired inside a write",
                pids=ended,
                instance=self.instance,
            )
        return bool(ended)

    def release(self) -> None:
        """Give the lease up at once, so a standby need not wait for it to expire; a lease
        that expired meanwhile is another's business, and nothing is recorded."""
        held = self.held
        if held is None:
            return
        try:
            with transaction(self.sessions) as session:
                now = self.wall()
                if lease.release(session, held, now=now):
                    self._announce(session, "released", held, "gave up leadership", now)
        except (RolloutdError, StoreError) as exc:
            log.warning("could not release the lease; it expires by itself", error=str(exc))
        self.held = None

    def _announce(
        self,
        session: Session,
        change: Literal["acquired", "released"],
        held: lease.Held,
        detail: str,
        now: datetime,
    ) -> None:
        """Record the change of leader in the audit log and alert the rollouts' channels, in
        the transaction that made it."""
        daemon_event(session, self.instance, f"leader_{change}", detail, now)
        enqueue_leadership_alert(
            session, change=change, instance=self.instance, epoch=held.epoch, now=now
        )
