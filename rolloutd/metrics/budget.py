"""A tick's query budget: a slow metrics source costs one rollout its verdicts, not the
daemon its ticks.

A tick asks its gates' queries one after another. Against a Prometheus that answers in 20 s,
six gates on two pools would hold a tick (and one of the leader's tick threads) for minutes,
and the rollout's next ticks would pile up behind it. Each tick may spend at most its
rollout's trigger interval asking: every query is cut at what is left of the budget, and a
query due once it is spent is not asked. Its gate is *inconclusive* with that reason, which
the rollout's inconclusive limit handles like any other missing data.

Within a tick the same question is asked once (:class:`Remembered`): each latency gate
records both pools' load, so a plan with four of them asked for the same four figures four
times.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import NamedTuple

from rolloutd.core.stats.matched import Cell
from rolloutd.gates.base import Measurement, MeasurementError, MetricsSource, Pool, cells_of

# The monotonic time by which the query in progress must be answered, while a budget runs.
_deadline: ContextVar[tuple[float, timedelta] | None] = ContextVar("query_deadline", default=None)


def time_left(timeout: float, query: str | None = None) -> float:
    """The timeout a query may have now: ``timeout``, or less if the tick's budget ends
    sooner.

    :raises MeasurementError: the budget is spent; the query must not be asked.
    """
    found = _deadline.get()
    if found is None:
        return timeout
    deadline, budget = found
    left = deadline - time.monotonic()
    if left <= 0:
        raise MeasurementError(
            f"not asked: this tick spent its query budget of {budget.total_seconds():g}s "
            f"on slower queries",
            query=query,
        )
    return min(timeout, left)


class Budgeted:
    """``source``, whose queries share ``budget`` from the moment this object is made."""

    def __init__(self, source: MetricsSource, budget: timedelta) -> None:
        self.source = source
        self.budget = budget
        self._deadline = time.monotonic() + budget.total_seconds()

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """Ask the source within what is left of the budget.

        :raises MeasurementError: the budget is spent, or the source's own failure.
        """
        token = _deadline.set((self._deadline, self.budget))
        try:
            time_left(float("inf"))  # checked here too for sources that ask no network
            return self.source.measure(signal, pool, window, now)
        finally:
            _deadline.reset(token)

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """The source's per-replica latency by load, within what is left of the budget.

        :raises MeasurementError: the budget is spent, the source cannot give cells, or its
            own failure.
        """
        token = _deadline.set((self._deadline, self.budget))
        try:
            time_left(float("inf"))
            return cells_of(self.source, signal, pool, window, now, slice)
        finally:
            _deadline.reset(token)


class _Failed(NamedTuple):
    """A remembered failure: raised anew each time, since an exception kept with its
    traceback would hold every frame of the tick in a reference cycle."""

    reason: str
    query: str | None

    def error(self) -> MeasurementError:
        return MeasurementError(self.reason, query=self.query)


class Remembered:
    """``source`` asked each question once in a tick: every gate of a rollout-tick shares
    its ``now``, so a second gate asking for the same signal, pool and window (both pools'
    load, recorded by every latency gate) gets the first answer, or its error, without
    another query. Made for one tick and dropped with it."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source
        self._measured: dict[tuple[object, ...], Measurement | _Failed] = {}
        self._cells: dict[tuple[object, ...], list[Cell] | _Failed] = {}

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The source's answer, asked at most once.

        :raises MeasurementError: the source's failure (remembered too).
        """
        key = (signal, pool, window, now)
        found = self._measured.get(key)
        if found is None:
            try:
                found = self.source.measure(signal, pool, window, now)
            except MeasurementError as exc:
                found = _Failed(exc.reason, exc.query)
            self._measured[key] = found
        if isinstance(found, _Failed):
            raise found.error()
        return found

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """The source's cells, asked at most once (each caller gets its own list).

        :raises MeasurementError: the source cannot give cells, or its failure.
        """
        key = (signal, pool, window, now, slice)
        found = self._cells.get(key)
        if found is None:
            try:
                found = cells_of(self.source, signal, pool, window, now, slice)
            except MeasurementError as exc:
                found = _Failed(exc.reason, exc.query)
            self._cells[key] = found
        if isinstance(found, _Failed):
            raise found.error()
        return list(found)
