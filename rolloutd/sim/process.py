"""One life of a simulated engine process, and the HTTP reply type the replica returns.

Everything that a real restart wipes lives here: the resident-sequence slots, the KV
occupancy and the engine's counters. A crash sets ``died`` so that requests in flight fail
at once; the replica then builds a fresh ``Process`` when the supervisor restarts it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rolloutd.sim.config import EngineConfig
from rolloutd.sim.scheduler import SlotPool
from rolloutd.sim.stats import EngineStats


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, JSON body (None for an empty body) and extra headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class Process:
    """One life of the engine process: its slots, KV occupancy and statistics."""

    def __init__(self, config: EngineConfig, started_at: float) -> None:
        report = config.capacity()
        self.config = config
        self.pool_tokens = report.kv_pool_tokens
        self.slots = SlotPool(report.resident_sequences)
        self.stats = EngineStats(config.max_seq_len, started_at)
        self.died = threading.Event()
        self.kv_tokens = 0
        self.in_prefill = 0
