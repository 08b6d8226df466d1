"""The simulated fleet's signals as the ``file`` metrics source reads them, for another process.

A ``rolloutd run`` in its own process cannot call ``SimulatorMetrics``; it can read the JSON
file of the ``file`` source (``{"signal": {"canary": {"value", "samples"}, ...}}``), so a
:class:`MetricsFileWriter` rewrites that file every ``period`` with each signal per pool over
the last ``window`` of wall time, atomically (a reader sees the old file or the new one).

The ``file`` source has no windows of its own: every gate reads the same window, whatever
its plan says, and a window that ended more than a minute before the file was written (a
compare gate's earlier steps) is refused. It carries a value and a sample count only, so
gates that need more than that (a latency gate's histogram buckets, a compare gate's counts
on both pools) stay inconclusive on it, and a signal without data in the window is left
out: the gate reads *no data*, never a zero.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rolloutd.gates.base import MeasurementError, Pool
from rolloutd.gates.load import LOAD_INFLIGHT, LOAD_REQUESTS
from rolloutd.sim.source import SimulatorMetrics

# Every signal SimulatorMetrics answers with a value and a sample count.
SIGNALS: tuple[str, ...] = (
    "requests",
    "queue_timeout_rate",
    "error_rate",
    "oom_events",
    "schema_violation_rate",
    "escalation_rate",
    "session_timeout_rate",
    "session_schema_violation_rate",
    "e2e_latency_p95",
    "ttft_p95",
    "queue_time_p95",
    "sequence_tokens_p99",
    "prompt_tokens_p99",
    "kv_cache_usage",
    LOAD_REQUESTS,
    LOAD_INFLIGHT,
)
POOLS: tuple[Pool, ...] = ("stable", "canary")


def snapshot(source: SimulatorMetrics, window: timedelta, now: datetime) -> dict[str, Any]:
    """Every signal of :data:`SIGNALS` on both pools over ``window`` ending at ``now``, in the
    ``file`` source's shape; a signal without data on a pool has no entry for that pool."""
    document: dict[str, Any] = {}
    for signal in SIGNALS:
        for pool in POOLS:
            try:
                measured = source.measure(signal, pool, window, now)
            except MeasurementError:
                continue
            entry = {"value": measured.value, "samples": measured.samples}
            document.setdefault(signal, {})[pool] = entry
    return document


def write_atomically(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` with ``document`` as JSON in one rename."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, path)


class MetricsFileWriter:
    """Rewrites one metrics file from a fleet's signals every ``period`` until ``stop()``."""

    def __init__(
        self,
        source: SimulatorMetrics,
        path: Path,
        *,
        window: timedelta = timedelta(minutes=5),
        period: float = 1.0,
    ) -> None:
        self.source = source
        self.path = path
        self.window = window
        self.period = period
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"sim-{path.name}")

    def start(self) -> MetricsFileWriter:
        """Write the file now, then keep it fresh in the background; returns self."""
        self.write()
        self._thread.start()
        return self

    def write(self) -> None:
        """Write the signals as they are now."""
        write_atomically(self.path, snapshot(self.source, self.window, datetime.now(UTC)))

    def stop(self) -> None:
        """Stop rewriting; the last file stays."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.wait(self.period):
            self.write()
