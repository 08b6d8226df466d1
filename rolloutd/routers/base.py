"""The router contract every load-balancer driver fulfils, and the in-memory twin.

Kept as small as Argo Rollouts' traffic-router interface: set an absolute weight (so
every call is idempotent), and read back what the load balancer really does, which
is the only evidence that a step was reached.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from rolloutd.routers import deadline


@dataclass(frozen=True)
class RouterState:
    """What the load balancer does now: the canary's share of new sessions, and mirroring."""

    weight: int
    mirror: bool = False


class Router(Protocol):
    """A load balancer that splits sessions between the stable and canary pools."""

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        """Send ``weight`` percent (0-100) of new sessions to the canary.

        :raises TemporaryError: the load balancer could not be reached; retry later.
        :raises PermanentError: the load balancer refused the change; retrying will not help.
        """

    def read_weight(self) -> RouterState:
        """Read back what the load balancer is doing now.

        :raises TemporaryError: the load balancer could not be reached or answered garbage.
        """

    def check(self) -> None:
        """Verify that the load balancer can do session-sticky weighted splits at all.

        :raises PermanentError: with what is wrong and how to fix it.
        """


def check_weight(weight: int) -> int:
    """Validate a weight before it reaches a driver.

    :raises ValueError: when it is not a whole percent from 0 to 100.
    """
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
        raise ValueError(f"a canary weight is a whole percent from 0 to 100, got {weight!r}")
    return weight


class MemoryRouter:
    """A router that only remembers: the twin used by tests and in-process demos."""

    write_timeout = timedelta(seconds=1)

    def __init__(self, weight: int = 0, *, mirror: bool = False) -> None:
        self._state = RouterState(weight, mirror)
        self._lock = threading.Lock()
        self.history: list[RouterState] = []

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        state = RouterState(check_weight(weight), mirror)
        deadline.check("setting the memory router")
        with self._lock:
            self._state = state
            self.history.append(state)

    def read_weight(self) -> RouterState:
        with self._lock:
            return self._state

    def check(self) -> None:
        return None
