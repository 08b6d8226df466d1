"""What every part of the tick shares: the database, the clocks and the leader's fence.

A router write starts only while the lease outlives the driver's own timeout plus ``margin``,
and must land within that timeout (``rolloutd.routers.deadline``); every store write commits
only while the lease is provably still this process's (``hold_for_write``), so a paused
ex-leader can neither touch the router nor write a fact once another instance leads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rolloutd.errors import TemporaryError
from rolloutd.store import queries
from rolloutd.store.db import transaction
from rolloutd.store.lease import Held, hold_for_write

if TYPE_CHECKING:
    from rolloutd.store.types import Session, Sessions

# Writes and side effects need the lease to outlive them by this much (at most; the daemon
# uses a quarter of a shorter lease).
LEASE_MARGIN = timedelta(seconds=2)


class NotLeading(TemporaryError):
    """This process does not (or no longer) hold the lease; it must not act."""


@dataclass
class Shell:
    """The database, the clocks and the lease of the process that ticks.

    ``clock`` is the rollout clock (bakes, deadlines, stored times); ``wall`` is the wall
    clock that leases and retry times live on, even when rollout time is scaled (the demo)
    or faked (tests).
    """

    sessions: Sessions
    clock: Callable[[], datetime]
    wall: Callable[[], datetime]
    lease: Callable[[], Held | None]
    instance: str
    margin: timedelta = LEASE_MARGIN

    @property
    def actor(self) -> str:
        """How this process signs events."""
        return f"rolloutd@{self.instance}"

    def held(self, outlive: timedelta = timedelta(0)) -> Held:
        """The lease, if it is ours and outlives ``outlive`` (a side effect's own timeout)
        plus the margin.

        :raises NotLeading: otherwise.
        """
        held = self.lease()
        if held is None or not held.valid_at(self.wall(), margin=self.margin + outlive):
            raise NotLeading("this rolloutd does not hold the leader lease")
        return held

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A transaction for reading."""
        with transaction(self.sessions) as session:
            yield session

    @contextmanager
    def write(self, held: Held) -> Iterator[Session]:
        """A transaction that commits only while ``held`` is provably still the leader lease.

        :raises NotLeading: when the lease was lost; nothing is written.
        """
        with transaction(self.sessions) as session:
            if not hold_for_write(session, held, now=self.wall() + self.margin):
                raise NotLeading("the leader lease was lost; writing nothing")
            yield session

    def event(
        self,
        session: Session,
        rollout_id: int,
        kind: str,
        detail: str,
        *,
        now: datetime,
        dedup_key: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Append an event signed by this process."""
        queries.append_event(
            session,
            rollout_id=rollout_id,
            kind=kind,
            actor=self.actor,
            detail=detail,
            now=now,
            dedup_key=dedup_key,
            data=data or {},
        )
