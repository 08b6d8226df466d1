"""How long to wait before trying again: one policy for every retry rolloutd makes.

Weight changes, redeploys, verifications and Slack deliveries all back off the same way
(2 s, doubling, up to a cap), so a fault that lasts costs a bounded number of attempts and
events per hour instead of one per tick. An error that knows better (a ``Retry-After``, a
:class:`~rolloutd.errors.TemporaryError` with a ``delay``) sets the wait itself.
"""

from __future__ import annotations

from datetime import timedelta

from rolloutd.errors import TemporaryError

FIRST = timedelta(seconds=2)
CAP = timedelta(minutes=5)


def backoff(attempts: int, *, cap: timedelta = CAP, first: timedelta = FIRST) -> timedelta:
    """The wait after the ``attempts``-th failure in a row: ``first``, twice that, ... at most
    ``cap``."""
    doublings = min(max(attempts - 1, 0), 32)
    wait: timedelta = first * (1 << doublings)
    return min(wait, cap)


def wait_after(error: TemporaryError, attempts: int, *, cap: timedelta = CAP) -> timedelta:
    """The wait after ``error``, the ``attempts``-th failure in a row: its own delay if it
    names one, else :func:`backoff`."""
    if error.delay is not None:
        return timedelta(seconds=max(error.delay, 0.0))
    return backoff(attempts, cap=cap)
