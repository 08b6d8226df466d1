"""A tick's query budget: a slow metrics source costs one rollout its verdicts, not the
daemon its ticks.

A tick asks its gates' queries one after another. Against a Prometheus that answers in 20 s,
six gates on two pools would hold a tick (and one of the leader's tick threads) for minutes,
and the rollout's next ticks would pile up behind it. Each tick may spend at most its
rollout's trigger interval asking: every query is cut at what is left of the budget, and a
query due once it is spent is not asked. Its gate is *inconclusive* with that reason, which
the rollout's inconclusive limit handles like any other missing data.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from datetime import datetime, timedelta

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
