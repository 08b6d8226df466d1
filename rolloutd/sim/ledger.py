"""The simulator's own record of every request a replica saw, in simulated time.

Prometheus would keep scraped series; in process we keep one record per request, with a
running position, so a metrics source can take "everything between two positions" as a
window. The ledger outlives engine restarts (the engine's own counters do not).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["ok", "timeout", "error", "unavailable"]


@dataclass(frozen=True)
class RequestRecord:
    """One request as the engine handled it; durations are simulated seconds."""

    replica: str
    pool: str
    outcome: Outcome
    queue_s: float = 0.0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    kv_usage: float = 0.0


class RequestLedger:
    """An append-only list of records with stable positions; old records may be dropped."""

    def __init__(self, max_records: int = 500_000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=max_records)
        self._appended = 0
        self._lock = threading.Lock()

    def append(self, record: RequestRecord) -> None:
        """Add one record."""
        with self._lock:
            self._records.append(record)
            self._appended += 1

    def position(self) -> int:
        """How many records were ever appended: the position after the newest one."""
        with self._lock:
            return self._appended

    def between(self, start: int, end: int) -> list[RequestRecord]:
        """The records appended at positions ``start`` (inclusive) to ``end`` (exclusive);
        records already dropped for space are missing."""
        with self._lock:
            first = self._appended - len(self._records)
            low, high = max(start, first) - first, max(min(end, self._appended) - first, 0)
            return [self._records[index] for index in range(low, high)] if low < high else []
