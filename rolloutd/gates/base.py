"""The contracts of gate evaluation: metrics sources in, evaluations with evidence out.

A metrics source answers "what is signal S on pool P over the last W?" with a value and
the number of samples behind it. A failed or empty answer is a *measurement error*: the
gate is inconclusive with the reason, never passed (Argo Rollouts' rule, kept here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from rolloutd.core.actions import GateResult, Verdict
from rolloutd.core.plan import Plan
from rolloutd.core.stats.matched import Cell

Pool = Literal["canary", "stable"]
Role = Literal["step", "trigger"]


class MeasurementError(Exception):
    """A metrics query failed, timed out, or returned nothing usable; the reason says which."""

    def __init__(self, reason: str, *, query: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.query = query


@dataclass(frozen=True)
class Measurement:
    """One signal on one pool: its value, how many samples it rests on, and how it was asked."""

    value: float
    samples: int | None = None
    query: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


class MetricsSource(Protocol):
    """Where signal values come from: Prometheus, the simulated fleet, or a test twin."""

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The value of ``signal`` on ``pool`` over ``window`` ending at ``now``.

        :raises MeasurementError: the query failed or returned no finite value.
        """


@runtime_checkable
class LoadCells(Protocol):
    """A source that can also say, per replica and slice, what latency its requests had and
    what load the replica carried then (for ``match_load``; ``rolloutd.metrics.cells``)."""

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """The cells of ``signal`` on ``pool`` over ``window`` ending at ``now``.

        :raises MeasurementError: the source cannot give them, or the query failed.
        """


def cells_of(
    source: object, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
) -> list[Cell]:
    """``source.cells(...)`` when the source can give cells (a wrapper passes the question
    on to the source it wraps, which answers it or raises this).

    :raises MeasurementError: the source cannot give cells, or its query failed.
    """
    if not isinstance(source, LoadCells):
        raise MeasurementError(
            f"match_load needs per-replica latency by load, which this metrics source "
            f"({type(source).__name__}) cannot give; use the prometheus source"
        )
    return source.cells(signal, pool, window, now, slice)


@dataclass(frozen=True)
class Evaluation:
    """One judgement of one gate, with everything needed to check it later."""

    gate: str
    role: Role
    verdict: Verdict
    evaluated_at: datetime
    value: float | None = None
    threshold: str | None = None
    query: str | None = None
    samples: int | None = None
    statistic: float | None = None
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def result(self) -> GateResult:
        """The part of the evaluation the state machine needs."""
        return GateResult(
            verdict=self.verdict,
            evaluated_at=self.evaluated_at,
            reason=self.reason,
            value=self.value,
            threshold=self.threshold,
        )


@dataclass(frozen=True)
class FinalWindow:
    """The data a compare gate's final look judges: from when the first step carrying the
    gate was verified to when the bake of the last one passed (``end`` None: not yet)."""

    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class Judging:
    """Everything a judge may look at besides the gate's own spec."""

    name: str
    role: Role
    source: MetricsSource
    now: datetime
    plan: Plan
    step_started_at: datetime | None = None
    weight: int | None = None
    """The canary weight in force (None: unknown, e.g. a test judging a gate on its own)."""
    idle: Pool | None = None
    """The pool that serves no live requests at this step (``Plan.idle_pool``): a gate that
    needs its traffic does not apply, rather than waiting for data that cannot come."""
    final: FinalWindow | None = None
    """Set at the last step that carries this gate (judged as a step gate, or as a trigger
    that also decides steps): where its final look looks."""
    bake_over: bool = False
    """The step's bake (or duration) has passed: a comparison that held too few events to
    show a difference passes on what the whole step showed (zero is evidence)."""
    earlier: tuple[tuple[datetime, datetime], ...] = ()
    """(verified, completed) of the earlier steps this gate judged with traffic on both
    pools: a canary-vs-stable test carries their evidence into this step."""

    def since_step_start(self, fallback: timedelta) -> timedelta:
        """The window from the moment the step's weight was verified, for cumulative tests."""
        if self.step_started_at is None or self.step_started_at >= self.now:
            return fallback
        return self.now - self.step_started_at


def finite(measurement: Measurement, signal: str, pool: Pool) -> float:
    """The measurement's value, if it is a real number.

    :raises MeasurementError: for NaN and infinities, which must never pass a gate.
    """
    value = measurement.value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MeasurementError(
            f"{signal} on {pool} is {value!r}, not a finite number", query=measurement.query
        )
    return float(value)
