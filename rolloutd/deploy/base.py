"""The executor contract: deploy a pinned set to one replica, then verify what it runs.

Both calls are synchronous, idempotent and bounded by a timeout. They never raise for an
operational failure (a script that fails or hangs, a replica that stays unhealthy, digests
that differ): they return a result with ``ok=False`` and a reason, which the caller
records, alerts on and retries with backoff. Only bad configuration raises ``BadInput``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from rolloutd.core.plan import Replica
from rolloutd.deploy.artefacts import PinnedSet

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class DeployResult:
    """What one deploy of ``set_name`` to ``replica`` did.

    ``changed`` is False when the replica already ran the set and nothing was done.
    ``exit_status``, ``timed_out`` and ``output_tail`` are the command executor's.
    """

    replica: str
    set_name: str
    set_digest: str
    executor: str
    ok: bool
    reason: str
    duration_s: float
    changed: bool = True
    exit_status: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the intent log, deploy records and ``--output json``."""
        return asdict(self)

    @classmethod
    def of(
        cls,
        executor: str,
        replica: Replica,
        artefacts: PinnedSet,
        *,
        ok: bool,
        reason: str,
        duration_s: float,
        **more: Any,
    ) -> DeployResult:
        """What the ``executor`` kind's deploy of ``artefacts`` to ``replica`` did; ``more``
        holds the optional fields (``changed``, ``exit_status``, ``detail`` ...)."""
        return cls(
            replica.name, artefacts.name, artefacts.digest, executor, ok, reason, duration_s, **more
        )


@dataclass(frozen=True)
class Verification:
    """Whether a replica is healthy and runs exactly ``set_name``.

    ``digest_ok`` is None when nothing could be compared (the plan has no executor).
    ``ok`` is True only when the replica is healthy and no digest check failed.
    """

    replica: str
    set_name: str
    ok: bool
    healthy: bool
    digest_ok: bool | None
    reason: str
    waited_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the intent log, deploy records and ``--output json``."""
        return asdict(self)


def verdict(
    replica: Replica,
    artefacts: PinnedSet,
    waited_s: float,
    healthy: bool,
    digest_ok: bool | None,
    reason: str,
    detail: dict[str, Any] | None = None,
) -> Verification:
    """Assemble a :class:`Verification`; ok only when healthy and no digest check failed."""
    return Verification(
        replica=replica.name,
        set_name=artefacts.name,
        ok=healthy and digest_ok is not False,
        healthy=healthy,
        digest_ok=digest_ok,
        reason=reason or f"healthy and running {artefacts.name}",
        waited_s=waited_s,
        detail=detail or {},
    )


class Executor(Protocol):
    """Puts a pinned artefact set on one replica, and checks that it runs there."""

    kind: str

    def deploy(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> DeployResult:
        """Deploy ``artefacts`` to ``replica``, within ``timeout`` seconds (default: the
        plan's). Deploying the set a replica already runs is harmless. Never raises for an
        operational failure: see ``DeployResult.ok`` and ``reason``."""

    def verify(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> Verification:
        """Wait up to ``timeout`` seconds (default: the plan's ``health_deadline``) for
        ``replica`` to be healthy, then compare the digests of what it runs with
        ``artefacts``. Read-only; never raises for an operational failure."""


class Stopwatch:
    """Seconds since start and until a deadline, on an injectable monotonic clock."""

    def __init__(self, budget: float, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.budget = budget
        self.started = clock()
        self.deadline = self.started + budget

    @classmethod
    def of_call(cls, timeout: float | None, default: timedelta, clock: Clock) -> Stopwatch:
        """The stopwatch of one executor call: ``timeout`` seconds, or the plan's ``default``
        when the caller gives none."""
        return cls(default.total_seconds() if timeout is None else timeout, clock)

    @property
    def elapsed(self) -> float:
        """Seconds since the stopwatch started."""
        return self.clock() - self.started

    @property
    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - self.clock())
