"""How much load each pool carries per replica, and the canary's share of stable's.

At 5% of sessions one canary replica next to three stable ones carries a sixth of the load
of each of them: its queue is short, so its latency and its queue timeouts look better than
they will at 100%. A latency gate that passes there says nothing about production. So the
gates that judge what load changes (latency, queue timeouts) measure both pools' load per
replica over the window they judge, and a pass below the gate's ``min_load_ratio`` is not
a pass (see ``rolloutd.gates.evaluate``).

Two signals, defined in every template file and answered by every source: requests per
second per replica (``load_requests_per_replica``: the load offered, whatever the build
does with it) and requests in flight per replica (``load_inflight_per_replica``: running
plus queued; it grows with a slower build, so it is the fallback, not the basis). The
ratio is the canary's figure over stable's; a figure that cannot be measured is said, and
then there is no ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rolloutd.gates.base import MeasurementError, MetricsSource, Pool, finite

LOAD_REQUESTS = "load_requests_per_replica"
LOAD_INFLIGHT = "load_inflight_per_replica"
LOAD_SIGNALS = (LOAD_REQUESTS, LOAD_INFLIGHT)


@dataclass(frozen=True)
class PoolLoad:
    """One pool's load per replica over the window, or why it is unknown."""

    requests_per_s: float | None
    inflight: float | None
    problems: tuple[str, ...] = ()

    def as_evidence(self) -> dict[str, Any]:
        """JSON-safe fields for a gate's evidence."""
        found: dict[str, Any] = {"requests_per_s": self.requests_per_s, "inflight": self.inflight}
        if self.problems:
            found["problems"] = list(self.problems)
        return found


@dataclass(frozen=True)
class Load:
    """Both pools' load per replica and the canary's share of stable's (None: unknown)."""

    canary: PoolLoad
    stable: PoolLoad
    ratio: float | None
    basis: str | None
    """Which figure the ratio compares: ``requests`` (the offered load) or ``inflight``."""
    unknown: str | None
    """Why there is no ratio."""
    window_seconds: float
    planned_ratio: float | None = None
    """What the plan's weight and replica counts predict, for comparison."""

    def as_evidence(self) -> dict[str, Any]:
        """The ``load`` entry of a gate's evidence."""
        return {
            "canary": self.canary.as_evidence(),
            "stable": self.stable.as_evidence(),
            "ratio": self.ratio,
            "basis": self.basis,
            "unknown": self.unknown,
            "planned_ratio": self.planned_ratio,
            "window_seconds": self.window_seconds,
        }


def measure_load(
    source: MetricsSource,
    window: timedelta,
    now: datetime,
    *,
    planned_ratio: float | None = None,
) -> Load:
    """Both pools' load per replica over ``window`` ending at ``now``; never raises for a
    metrics problem (an unknown figure says why, and then the ratio is unknown)."""
    canary = _pool_load(source, "canary", window, now)
    stable = _pool_load(source, "stable", window, now)
    ratio = basis = unknown = None
    for name, c, s in (
        ("requests", canary.requests_per_s, stable.requests_per_s),
        ("inflight", canary.inflight, stable.inflight),
    ):
        if c is not None and s is not None and s > 0:
            ratio, basis = c / s, name
            break
    if ratio is None:
        unknown = _why_unknown(canary, stable)
    return Load(canary, stable, ratio, basis, unknown, window.total_seconds(), planned_ratio)


def _pool_load(source: MetricsSource, pool: Pool, window: timedelta, now: datetime) -> PoolLoad:
    figures: list[float | None] = []
    problems = []
    for signal in LOAD_SIGNALS:
        try:
            figures.append(finite(source.measure(signal, pool, window, now), signal, pool))
        except MeasurementError as exc:
            figures.append(None)
            problems.append(exc.reason)
    return PoolLoad(figures[0], figures[1], tuple(problems))


def _why_unknown(canary: PoolLoad, stable: PoolLoad) -> str:
    if canary.problems and canary.requests_per_s is None and canary.inflight is None:
        return canary.problems[0]
    if stable.problems and stable.requests_per_s is None and stable.inflight is None:
        return stable.problems[0]
    if stable.requests_per_s == 0 or stable.inflight == 0:
        return "stable carries no load to compare with"
    # One figure on one pool, the other on the other: nothing to compare like with like.
    return "; ".join((*canary.problems, *stable.problems)) or "no comparable figures"
