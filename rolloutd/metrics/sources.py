"""Metrics sources without a server: an in-memory twin and a JSON file read on every query.

The file source lets a test (or a staging drill) drive the daemon in another process by
rewriting one file: ``{"signal": {"canary": {"value": 0.01, "samples": 900}, ...}}``. The
file holds one window, the latest: a question about a window that ended well before the
file was written (a compare gate's earlier steps) is refused rather than answered with the
present, which would count the same events twice.
Both answer the load signals (``load_requests_per_replica``, ``load_inflight_per_replica``)
like any other: set them, or the load is unknown and a latency gate cannot pass.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rolloutd.core.stats.matched import Cell
from rolloutd.gates.base import Measurement, MeasurementError, Pool
from rolloutd.gates.load import LOAD_INFLIGHT, LOAD_REQUESTS


class MemoryMetrics:
    """Signal values set by the caller; a missing signal is a measurement error."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, Pool], Measurement | MeasurementError] = {}
        self._cells: dict[tuple[str, Pool], list[Cell]] = {}
        self._lock = threading.Lock()

    def set(
        self,
        signal: str,
        pool: Pool,
        value: float,
        samples: int | None = None,
        raw: dict[str, Any] | None = None,
    ) -> None:
        """Make ``signal`` on ``pool`` read ``value`` (and ``raw``, e.g. buckets) from now on."""
        measurement = Measurement(value, samples, query=f"memory:{signal}", raw=raw or {})
        with self._lock:
            self._values[(signal, pool)] = measurement

    def set_load(self, pool: Pool, requests_per_s: float, inflight: float | None = None) -> None:
        """Make ``pool`` carry ``requests_per_s`` (and ``inflight``) per replica from now on."""
        self.set(LOAD_REQUESTS, pool, requests_per_s)
        if inflight is not None:
            self.set(LOAD_INFLIGHT, pool, inflight)

    def fail(self, signal: str, pool: Pool, reason: str) -> None:
        """Make queries of ``signal`` on ``pool`` fail with ``reason``."""
        with self._lock:
            self._values[(signal, pool)] = MeasurementError(reason, query=f"memory:{signal}")

    def set_cells(self, signal: str, pool: Pool, cells: Sequence[Cell]) -> None:
        """Make ``signal``'s per-replica latency by load on ``pool`` read ``cells``, whatever
        the window (a test states the cells of the window it judges)."""
        with self._lock:
            self._cells[(signal, pool)] = list(cells)

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """The cells set for ``signal`` on ``pool``; none set is a measurement error."""
        with self._lock:
            found = self._cells.get((signal, pool))
        if found is None:
            raise MeasurementError(f"no cells for {signal} on {pool}", query=f"memory:{signal}")
        return list(found)

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        with self._lock:
            found = self._values.get((signal, pool))
        if found is None:
            raise MeasurementError(f"no data for {signal} on {pool}", query=f"memory:{signal}")
        if isinstance(found, MeasurementError):
            raise found
        return found


PAST_TOLERANCE = timedelta(seconds=60)
"""How long before the file was written a window may end and still be answered by it."""


class FileMetrics:
    """Signal values read from a JSON file on every query: the window it was written for. The
    file is parsed again only when it changed (another inode, mtime or size: a writer that
    replaces it atomically always gives another inode)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._parsed: tuple[tuple[int, int, int], Any] | None = None

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        query = f"file:{self.path}#{signal}.{pool}"
        try:
            stat = self.path.stat()
            written = datetime.fromtimestamp(stat.st_mtime, UTC)
            if now < written - PAST_TOLERANCE:
                raise MeasurementError(
                    f"metrics file {self.path} holds only its latest window (written "
                    f"{written:%Y-%m-%d %H:%M:%S} UTC): it cannot answer one that ended "
                    f"{now.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
                    query=query,
                )
            document = self._document((stat.st_ino, stat.st_mtime_ns, stat.st_size))
        except FileNotFoundError:
            raise MeasurementError(
                f"metrics file {self.path} does not exist", query=query
            ) from None
        except (OSError, ValueError) as exc:
            raise MeasurementError(f"metrics file {self.path}: {exc}", query=query) from None
        entry = document.get(signal, {}).get(pool) if isinstance(document, dict) else None
        if not isinstance(entry, dict) or "value" not in entry:
            raise MeasurementError(f"no data for {signal} on {pool}", query=query)
        value, samples = entry["value"], entry.get("samples")
        if value is None:
            raise MeasurementError(f"{signal} on {pool} has no value", query=query)
        if isinstance(value, str):
            # JSON has no NaN literal; allow the strings Prometheus uses for them.
            value = float(value) if value in ("NaN", "+Inf", "-Inf") else value
        return Measurement(value, samples if isinstance(samples, int) else None, query=query)

    def _document(self, version: tuple[int, int, int]) -> Any:
        parsed = self._parsed
        if parsed is not None and parsed[0] == version:
            return parsed[1]
        document = json.loads(self.path.read_text())
        self._parsed = (version, document)
        return document
