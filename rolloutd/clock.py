"""Rollout time that an NTP step of the wall clock cannot move.

A 48 h bake is elapsed time, and the wall clock is a poor measure of it: ``ntpd`` or
``chronyd`` may step it by minutes or hours (a VM resumed from a snapshot, a host that booted
before its time server answered). :class:`AnchoredClock` reads the wall clock once, at
start-up, and from then on adds the monotonic clock's elapsed seconds, so bakes and deadlines
count real time while the times stored beside them still read as dates. The wall clock is
consulted again only to notice that it stepped (:meth:`AnchoredClock.jump`), so the daemon
can record the step and reschedule the work that APScheduler keeps on wall time.

On Linux ``time.monotonic`` is slewed by NTP just as the wall clock is, but never stepped, so
the two part only by steps. It stops while the host is suspended: a resumed host looks like a
step forward, and a bake does not count the time the canary served nobody.

A restart re-anchors to the wall clock of the day: rollout time is kept steady within one
process, not across processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


class AnchoredClock:
    """The wall time read at construction, plus the monotonic seconds elapsed since.

    ``wall`` must return aware datetimes; ``monotonic`` seconds from any fixed origin. Both
    are injectable so tests can step one without the other.
    """

    def __init__(
        self,
        *,
        wall: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self.anchor = wall().astimezone(UTC)
        self._anchor_monotonic = monotonic()
        self._reported = timedelta(0)  # how far the wall had stepped at the last reported jump

    def now(self) -> datetime:
        """The anchored wall time plus the monotonic time elapsed since."""
        return self.anchor + timedelta(seconds=self._monotonic() - self._anchor_monotonic)

    def __call__(self) -> datetime:
        """The same as :meth:`now`, so the clock fits wherever a ``Callable[[], datetime]``
        does."""
        return self.now()

    def skew(self) -> timedelta:
        """How far the wall clock is ahead of this clock (negative: behind); the sum of the
        wall clock's steps since the anchor."""
        return self._wall() - self.now()

    def jump(self, threshold: timedelta) -> timedelta | None:
        """The wall clock's step since the last reported one, if larger than ``threshold``.

        Each step is reported once; steps at or below ``threshold`` add up until together
        they pass it. Not thread-safe: one caller (the daemon's main loop) asks.
        """
        skew = self.skew()
        step = skew - self._reported
        if abs(step) <= threshold:
            return None
        self._reported = skew
        return step
