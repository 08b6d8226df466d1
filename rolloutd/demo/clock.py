"""A scaled clock: the demo's 48 h bakes pass in seconds on the real daemon loop."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class ScaledClock:
    """Simulated time that runs ``speed`` times faster than the wall clock."""

    def __init__(self, speed: float, start: datetime | None = None) -> None:
        self.speed = speed
        self.start = start or datetime.now(UTC)
        self._origin = time.monotonic()

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=(time.monotonic() - self._origin) * self.speed)
