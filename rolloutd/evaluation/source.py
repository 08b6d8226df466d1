"""The suite's schema violations, added to the live counts the schema gates judge.

In a shadow step without mirroring the canary sees no user traffic, so the live schema
violation rate has no samples; the suite's calls are real calls to the canary build and
count as such. :class:`SuiteFedSource` wraps the plan's metrics source: for the schema
signals it adds the newest suite run's violations and calls of the pool (canary runs for
the canary, baseline runs for stable) to what the live source measured, and says so in
``raw``. Every other signal passes through untouched.

The counts arrive as plain data, read by the tick with its other reads: a metrics source
never reads the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from rolloutd.core.stats.matched import Cell
from rolloutd.gates.base import Measurement, MeasurementError, MetricsSource, Pool, cells_of

SuiteCounts = tuple[int, int, int | None]
"""(schema violations, tool calls, run id) of the newest suite run for a pool."""

NO_RUN: SuiteCounts = (0, 0, None)

RATE_SIGNAL = "schema_violation_rate"
COUNT_SIGNAL = "schema_violations"


@dataclass(frozen=True)
class SuiteFedSource:
    """A metrics source whose schema signals include the suite's calls.

    ``counts`` holds each pool's newest suite run in the step (``records.schema_counts`` of
    the canary runs for the canary, of the baseline runs for stable); a pool without one
    counts nothing.
    """

    inner: MetricsSource
    counts: Mapping[Pool, SuiteCounts]

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The live measurement, plus the suite's calls for the schema signals.

        :raises MeasurementError: the live query failed and there is no suite run either.
        """
        if signal not in (RATE_SIGNAL, COUNT_SIGNAL):
            return self.inner.measure(signal, pool, window, now)
        violations, calls, run_id = self.counts.get(pool, NO_RUN)
        try:
            live: Measurement | None = self.inner.measure(signal, pool, window, now)
        except MeasurementError:
            if calls == 0:
                raise
            live = None  # no live traffic on this pool yet: the suite alone speaks
        if calls == 0 or (live is not None and live.samples is None):
            assert live is not None
            return live
        live_samples = live.samples if live is not None and live.samples is not None else 0
        live_value = live.value if live is not None else 0.0
        live_events = live_value * live_samples if signal == RATE_SIGNAL else live_value
        samples = live_samples + calls
        events = live_events + violations
        raw = {
            "live": None if live is None else {"value": live.value, "samples": live.samples},
            "suite": {"violations": violations, "calls": calls, "run_id": run_id},
        }
        value = events / samples if signal == RATE_SIGNAL else events
        query = live.query if live is not None else None
        return Measurement(value, samples, query, raw)

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """The live source's per-replica latency by load (a suite has no load to add).

        :raises MeasurementError: the live source cannot give cells, or its query failed.
        """
        return cells_of(self.inner, signal, pool, window, now, slice)
