"""The deadline a router write must land by, so a write cannot escape the leader's fence.

A load balancer cannot check a fencing token. The leader therefore starts a router write
only while its lease outlives the driver's ``write_timeout`` (plus a margin), and runs the
write inside :func:`within`: each driver calls :func:`check` right before the step that
makes the change take effect (the file rename, the runtime-API command, the reload signal)
and bounds what it waits for by :func:`remaining`. A write that would land after its
deadline, when another instance may lead, is abandoned instead. The deadline is on the
monotonic clock, so a process frozen (SIGSTOP) past it finds it passed when it wakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from rolloutd.errors import TemporaryError

# What a driver without a ``write_timeout`` of its own is allowed.
DEFAULT_WRITE_TIMEOUT = timedelta(seconds=2)
# The longest ``write_timeout`` of the drivers here (NGINX: ``nginx -T`` and the reload).
LONGEST_WRITE_TIMEOUT = timedelta(seconds=10)

_deadline: ContextVar[tuple[float, Callable[[], float]] | None] = ContextVar(
    "router_deadline", default=None
)
_epoch: ContextVar[int | None] = ContextVar("router_writer_epoch", default=None)


class DeadlinePassed(TemporaryError):
    """The write would land after its deadline; nothing was changed."""


def write_timeout(router: object) -> timedelta:
    """How long ``router`` may take to land a weight change (its ``write_timeout``)."""
    timeout = getattr(router, "write_timeout", DEFAULT_WRITE_TIMEOUT)
    return timeout if isinstance(timeout, timedelta) else DEFAULT_WRITE_TIMEOUT


@contextmanager
def within(
    timeout: timedelta, *, monotonic: Callable[[], float] = time.monotonic
) -> Iterator[None]:
    """Run a router write that must land within ``timeout`` from now."""
    token = _deadline.set((monotonic() + timeout.total_seconds(), monotonic))
    try:
        yield
    finally:
        _deadline.reset(token)


@contextmanager
def writing_as(epoch: int) -> Iterator[None]:
    """Run a router write on behalf of the leader of lease ``epoch``: a driver that keeps a
    record of its writes (the ``file`` driver's journal) stamps each with it."""
    token = _epoch.set(epoch)
    try:
        yield
    finally:
        _epoch.reset(token)


def epoch() -> int | None:
    """The lease epoch of the write in progress (None outside :func:`writing_as`)."""
    return _epoch.get()


def remaining(default: float) -> float:
    """Seconds left before the deadline (``default`` outside :func:`within`), at most
    ``default``: what a driver may still wait for a socket or a command."""
    current = _deadline.get()
    if current is None:
        return default
    at, monotonic = current
    return max(0.0, min(default, at - monotonic()))


def check(what: str, *, need: float = 0.0) -> None:
    """Refuse to take the step ``what`` unless ``need`` seconds are left before the deadline.

    :raises DeadlinePassed: when they are not; the caller must change nothing.
    """
    current = _deadline.get()
    if current is None:
        return
    at, monotonic = current
    left = at - monotonic()
    if left <= need:
        raise DeadlinePassed(
            f"{what}: the write deadline has passed (the leader lease may be another's); "
            "not sending it"
        )
