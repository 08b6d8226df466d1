"""Synthetic per-replica latency by load, as Prometheus would report it to a matched-load gate.

A step of ``slices`` slices on a fleet of ``canaries`` + ``stables`` replicas at a canary
weight. Load moves: stable's mean requests in flight per replica wanders (a log random walk
between ``low`` and ``high``, the busy and quiet minutes of a day), and each canary replica
carries the planned share of it (``planned_load_ratio``). Per replica and slice, the requests
in flight are sampled at each scrape (Poisson around the mean) and their mean is the cell's
load; the requests of the slice (Little's law over the mean service time) each meet their own
in-flight count at arrival, and their time to first token is a prefill that grows with that
count (``per_request`` per request in flight, queueing past ``max_num_seqs``) times a session's
prompt factor (a slice holds a few turns of each session, which share it) times noise. A slower
build multiplies the canary's whole latency by ``slowdown``.

What it is for: ``bench/matched_load.py`` (false alarms and detection on 1:1 and 3:1
fleets) and the matched-load gate's tests. It uses ``random.Random`` only, seeded.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from rolloutd.core.plan import planned_load_ratio
from rolloutd.core.stats.matched import Cell, Pool

TTFT_EDGES = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
"""vLLM's ``vllm:time_to_first_token_seconds`` bucket edges (V1, 0.9+)."""


@dataclass(frozen=True)
class Fleet:
    """The replicas, the weight, and the engine's latency model."""

    canaries: int = 1
    stables: int = 1
    weight: int = 5
    low: float = 0.5
    """The quietest stable load (mean requests in flight per replica)."""
    high: float = 10.0
    slice_seconds: float = 30.0
    scrapes_per_slice: int = 6
    service_seconds: float = 6.0
    """Mean time a request stays in flight (prefill, decode of a streamed answer)."""
    prefill_seconds: float = 0.3
    per_request: float = 0.1
    """Each request already in flight lengthens a prefill by this share."""
    max_num_seqs: int = 8
    noise: float = 0.25
    session_spread: float = 0.3
    """Sessions differ in prompt length: their prefills differ by this log-spread."""
    turns_per_slice: float = 3.0
    """Turns of one session that fall in one slice (a turn every ~10 s)."""


def step_cells(
    fleet: Fleet, slices: int, rng: random.Random, *, slowdown: float = 1.0
) -> list[list[Cell]]:
    """The cells of each slice of one step (``slices`` lists, in order)."""
    ratio = planned_load_ratio(fleet.weight, fleet.canaries, fleet.stables)
    level = math.log(math.sqrt(fleet.low * fleet.high))
    span = (math.log(fleet.low), math.log(fleet.high))
    found = []
    for _ in range(slices):
        level = min(span[1], max(span[0], level + rng.gauss(0.0, 0.15)))
        stable_mean = math.exp(level)
        cells = []
        for pool, count, mean, factor in (
            ("stable", fleet.stables, stable_mean, 1.0),
            ("canary", fleet.canaries, stable_mean * ratio, slowdown),
        ):
            for replica in range(count):
                cells.append(_cell(fleet, pool, f"{pool}-{replica}", mean, factor, rng))  # type: ignore[arg-type]
        found.append(cells)
    return found


def _cell(
    fleet: Fleet, pool: Pool, name: str, mean: float, factor: float, rng: random.Random
) -> Cell:
    scraped = [_poisson(mean, rng) for _ in range(fleet.scrapes_per_slice)]
    busy = sum(scraped)
    # What its requests met, as rolloutd.metrics.cells reads it from the scrapes.
    load = max(1.0, sum(n * n for n in scraped) / busy) if busy else 1.0
    arrivals = _poisson(mean * fleet.slice_seconds / fleet.service_seconds, rng)
    counts = [0.0] * (len(TTFT_EDGES) + 1)
    # A session's turns come every few seconds: a slice holds a few turns of each session.
    sessions = [
        math.exp(rng.gauss(0.0, fleet.session_spread))
        for _ in range(max(1, round(arrivals / fleet.turns_per_slice)))
    ]
    for _ in range(arrivals):
        session = rng.choice(sessions)
        ttft = _ttft(fleet, 1 + _poisson(mean, rng), rng) * session * factor
        counts[_bucket(ttft)] += 1
    cumulative, total = [], 0.0
    for edge, n in zip((*TTFT_EDGES, math.inf), counts, strict=True):
        total += n
        cumulative.append((edge, total))
    return Cell(pool, load, tuple(cumulative), name)


def _ttft(fleet: Fleet, in_flight: int, rng: random.Random) -> float:
    running = min(in_flight, fleet.max_num_seqs)
    waiting = in_flight - running
    prefill = fleet.prefill_seconds * (1.0 + fleet.per_request * running)
    # Past max_num_seqs a request waits for a slot: about one service time per batch ahead.
    queued = waiting / fleet.max_num_seqs * fleet.service_seconds * 0.1
    return (prefill + queued) * math.exp(rng.gauss(0.0, fleet.noise))


def _bucket(value: float) -> int:
    for i, edge in enumerate(TTFT_EDGES):
        if value <= edge:
            return i
    return len(TTFT_EDGES)


def _poisson(mean: float, rng: random.Random) -> int:
    if mean <= 0:
        return 0
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    # Knuth's method: fine for the small means of one replica's queue.
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
