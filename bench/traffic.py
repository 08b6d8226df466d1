"""Simulated agent traffic as Prometheus would report it, for ``bench/gate_statistics.py``.

Sessions of 15 turns (a request every 20 s) arrive at 100 a minute and go to the canary with
the share in force when they start; a session stays on its pool and its replica. Each turn
is one request with one tool call; a session may escalate once, at its last turn. With an
intra-session correlation ``icc`` a session draws its own timeout and schema-violation
probabilities from a Beta distribution with that correlation (and its own latency level),
so its turns share a fate. Load may swing per minute on both pools together, which moves
arrivals, failure rates and latency, and the second step may be busier than the first.

Every replica exports counters (requests, timeouts, tool calls, schema violations,
sessions, escalations, and the gateway's once-per-session counts: sessions with a timeout
and sessions with a schema violation, each counted at its first such turn) scraped every
15 s at its own offset; a restart sets a replica's counters back to zero, and a scrape gap
leaves no sample. Counts over a window are what
``sum(increase(x[w]))`` answers: per series, the difference of the first and last samples
in ``(t - w, t]`` with every drop read as a reset, extrapolated to the window's edges as
Prometheus' ``extrapolatedRate`` does, summed over the pool's series and rounded as rolloutd
rounds counts. A pool whose newest sample is older than two scrape intervals is not data
(rolloutd's freshness rule): NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

SESSIONS_PER_MINUTE = 100.0
TURNS = 15
TURN_SECONDS = 20.0
SCRAPE = 15.0
TICK = 30.0
STEP_SECONDS = 6000.0  # 100 min per step: 10,000 sessions each at 100 a minute
PLANNED = (0.05, 0.25)
HORIZON = STEP_SECONDS * len(PLANNED)
REPLICAS = {"canary": 2, "stable": 3}
BASE = {"timeouts": 0.01, "schema": 0.003, "escalation": 0.05}
LATENCY_MEDIAN, LATENCY_SIGMA = 2.0, 0.5
BOUNDS = np.array([0.25 * 2 ** (i / 8) for i in range(57)])  # native-histogram-like buckets
COUNTERS = (
    "requests",
    "timeouts",
    "tool_calls",
    "violations",
    "sessions",
    "escalations",
    "sessions_timed_out",
    "sessions_violated",
)
SIGNALS = {  # signal -> (events counter, exposure counter)
    "timeouts": ("timeouts", "requests"),
    "schema": ("violations", "tool_calls"),
    "session timeouts": ("sessions_timed_out", "sessions"),
    "session schema": ("sessions_violated", "sessions"),
    "escalation": ("escalations", "sessions"),
}


@dataclass(frozen=True)
class Conditions:
    """How the traffic departs from independent requests at a steady load."""

    name: str
    icc: float = 0.0
    load_swing: float = 0.0
    busier_second_step: float = 1.0
    share_factor: float = 1.0
    restart: bool = False
    gaps: bool = False


@dataclass(frozen=True)
class Canary:
    """What the canary does differently (None: the same as stable)."""

    timeouts: float | None = None
    schema: float | None = None
    escalation: float | None = None
    latency_scale: float = 1.0


@dataclass
class Series:
    """One counter of one replica as Prometheus stored it."""

    times: Array
    values: Array
    corrected: Array  # values plus every earlier drop's last value: resets undone


@dataclass
class Traffic:
    """One simulated rollout: the pools' series, true session counts and latencies."""

    series: dict[tuple[str, str], list[Series]]
    canary_session_starts: Array
    latency: dict[str, tuple[Array, Array]] = field(default_factory=dict)  # pool -> (t, s)

    def canary_sessions(self, t: float) -> int:
        """Canary sessions started by ``t`` (what detection delays are counted in)."""
        return int(np.searchsorted(self.canary_session_starts, t, side="right"))

    def counts(self, counter: str, pool: str, start: Array, end: Array) -> Array:
        """``round(sum(increase(counter{pool}[end - start])))`` at each ``end``; NaN when
        stale or with fewer than two samples on every series."""
        total = np.zeros(len(end))
        seen = np.zeros(len(end), dtype=bool)
        newest = np.full(len(end), -np.inf)
        for series in self.series[(pool, counter)]:
            value, ok, last = increase(series, start, end)
            total += np.where(ok, value, 0.0)
            seen |= ok
            newest = np.maximum(newest, last)
        fresh = end - newest <= 2 * SCRAPE
        return np.where(seen & fresh, np.round(total), np.nan)

    def tallies(self, signal: str, start: Array, end: Array) -> Array:
        """Columns canary events, canary exposure, stable events, stable exposure."""
        events, exposure = SIGNALS[signal]
        return np.stack(
            [
                self.counts(events, "canary", start, end),
                self.counts(exposure, "canary", start, end),
                self.counts(events, "stable", start, end),
                self.counts(exposure, "stable", start, end),
            ],
            axis=1,
        )


def increase(series: Series, start: Array, end: Array) -> tuple[Array, Array, Array]:
    """Prometheus' ``increase()`` of one series over ``(start, end]``: value, whether there
    were two samples, and the newest sample's time at or before ``end``."""
    times, values, corrected = series.times, series.values, series.corrected
    last_index = np.searchsorted(times, end, side="right") - 1
    newest = np.where(last_index >= 0, times[np.clip(last_index, 0, None)], -np.inf)
    if len(times) < 2:
        return np.zeros(len(end)), np.zeros(len(end), dtype=bool), newest
    first = np.clip(np.searchsorted(times, start, side="right"), 0, len(times) - 1)
    last = np.clip(last_index, 0, len(times) - 1)
    ok = last - first >= 1
    raw = corrected[last] - corrected[first]
    t0, t1 = times[first], times[last]
    sampled = np.where(ok, t1 - t0, 1.0)
    average = sampled / np.maximum(last - first, 1)
    to_start, to_end = t0 - start, end - t1
    # A counter is not extrapolated below zero: at most back to where it would have been 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        to_zero = np.where(raw > 0, sampled * values[first] / raw, np.inf)
    to_start = np.where((raw > 0) & (values[first] >= 0) & (to_zero < to_start), to_zero, to_start)
    limit = 1.1 * average
    interval = sampled + np.where(to_start < limit, to_start, average / 2)
    interval += np.where(to_end < limit, to_end, average / 2)
    return np.where(ok, raw * interval / sampled, 0.0), ok, newest


def _beta_probabilities(rng: np.random.Generator, mean: float, icc: float, n: int) -> Array:
    """Per-session probabilities with mean ``mean`` and intra-session correlation ``icc``."""
    if icc <= 0 or mean <= 0:
        return np.full(n, mean)
    concentration = (1 - icc) / icc
    return rng.beta(mean * concentration, (1 - mean) * concentration, n)


def simulate(
    conditions: Conditions,
    canary: Canary,
    rng: np.random.Generator,
    base: dict[str, float] | None = None,
) -> Traffic:
    """One rollout of traffic under ``conditions`` with ``canary``'s differences; ``base``
    replaces stable's rates (:data:`BASE` by default)."""
    base = BASE | (base or {})
    minutes = math.ceil(HORIZON / 60)
    load = np.ones(minutes + TURNS)
    if conditions.load_swing:
        swing = conditions.load_swing
        load = rng.uniform(1 - swing, 1 + swing, minutes + TURNS)
    arrivals = rng.poisson(SESSIONS_PER_MINUTE * load[:minutes])
    starts = np.repeat(np.arange(minutes) * 60.0, arrivals) + rng.uniform(0, 60, arrivals.sum())
    starts.sort()
    n = len(starts)
    step = (starts >= STEP_SECONDS).astype(int)
    share = np.array(PLANNED)[step] * conditions.share_factor
    on_canary = rng.random(n) < share
    replica = np.where(
        on_canary, rng.integers(0, REPLICAS["canary"], n), rng.integers(0, REPLICAS["stable"], n)
    )

    def per_session(signal: str, changed: float | None) -> Array:
        p = _beta_probabilities(rng, base[signal], conditions.icc, n)
        if changed is not None:
            p = np.where(on_canary, _beta_probabilities(rng, changed, conditions.icc, n), p)
        return p

    timeout_p = per_session("timeouts", canary.timeouts)
    schema_p = per_session("schema", canary.schema)
    escalation_p = np.where(
        on_canary,
        base["escalation"] if canary.escalation is None else canary.escalation,
        base["escalation"],
    )
    level = rng.normal(0, LATENCY_SIGMA * math.sqrt(conditions.icc), n)

    turn = np.arange(TURNS) * TURN_SECONDS
    times = (starts[:, None] + turn[None, :]).ravel()
    session = np.repeat(np.arange(n), TURNS)
    index = np.tile(np.arange(TURNS), n)
    keep = times < HORIZON
    times, session, index = times[keep], session[keep], index[keep]
    pressure = load[(times // 60).astype(int)] * np.where(
        times >= STEP_SECONDS, conditions.busier_second_step, 1.0
    )
    timed_out = rng.random(len(times)) < np.minimum(1, timeout_p[session] * pressure)
    violated = rng.random(len(times)) < np.minimum(1, schema_p[session] * pressure)
    escalated = (index == TURNS - 1) & (
        rng.random(len(times)) < np.minimum(1, escalation_p[session] * pressure)
    )

    canary_turn = on_canary[session]
    scale = np.where(canary_turn, canary.latency_scale, 1.0) * np.sqrt(pressure)
    latency = (
        LATENCY_MEDIAN
        * scale
        * np.exp(
            level[session]
            + rng.normal(0, LATENCY_SIGMA * math.sqrt(1 - conditions.icc), len(times))
        )
    )

    events = _events(session, index, timed_out, violated, escalated)
    restart_at: float | None = None
    if conditions.restart:
        restart_at = float(rng.uniform(0.2, 0.8) * STEP_SECONDS + STEP_SECONDS * rng.integers(2))
    series: dict[tuple[str, str], list[Series]] = {}
    for pool, count in REPLICAS.items():
        mine = canary_turn if pool == "canary" else ~canary_turn
        for r in range(count):
            on_replica = mine & (replica[session] == r)
            scrapes = _scrape_times(rng, conditions.gaps and pool == "canary" and r == 0)
            if conditions.gaps:
                scrapes = scrapes[rng.random(len(scrapes)) >= 0.02]
            resets = restart_at is not None and pool == "canary" and r == 0
            for name, happened in events.items():
                when = np.sort(times[on_replica & happened])
                series.setdefault((pool, name), []).append(
                    _series(when, scrapes, restart_at if resets else None)
                )
    latencies = {
        pool: (times[mask], latency[mask])
        for pool, mask in (("canary", canary_turn), ("stable", ~canary_turn))
    }
    return Traffic(series, starts[on_canary], latencies)


def _events(
    session: NDArray[np.int64],
    index: NDArray[np.int64],
    timed_out: NDArray[np.bool_],
    violated: NDArray[np.bool_],
    escalated: NDArray[np.bool_],
) -> dict[str, NDArray[np.bool_]]:
    """Which turns each counter counts."""
    violations = violated & ~timed_out
    return {
        "requests": np.ones(len(session), dtype=bool),
        "timeouts": timed_out,
        "tool_calls": ~timed_out,  # an answered request makes one tool call
        "violations": violations,
        "sessions": index == 0,
        "escalations": escalated,
        "sessions_timed_out": _first_of_session(session, timed_out),
        "sessions_violated": _first_of_session(session, violations),
    }


def _first_of_session(session: NDArray[np.int64], happened: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """The turns that are their session's first with ``happened`` (turns in time order within
    each session, sessions in order): the gateway counts such a session once, then."""
    first = np.zeros(len(session), dtype=bool)
    where = np.flatnonzero(happened)
    if len(where):
        _, index = np.unique(session[where], return_index=True)
        first[where[index]] = True
    return first


def _scrape_times(rng: np.random.Generator, long_gap: bool) -> Array:
    offset = rng.uniform(0, SCRAPE)
    scrapes = np.arange(offset, HORIZON + SCRAPE, SCRAPE)
    if long_gap:
        # A three-minute gap on this target, somewhere inside a step.
        gap_start = rng.uniform(0.1, 0.9) * HORIZON
        scrapes = scrapes[(scrapes < gap_start) | (scrapes >= gap_start + 180)]
    return scrapes


def _series(events: Array, scrapes: Array, restart_at: float | None) -> Series:
    """The counter's value at each scrape, with a reset to zero at ``restart_at``."""
    values = np.searchsorted(events, scrapes, side="right").astype(float)
    if restart_at is not None:
        before = np.searchsorted(events, restart_at, side="right")
        values = np.where(scrapes >= restart_at, values - before, values)
    drops = np.concatenate([[0.0], np.where(np.diff(values) < 0, values[:-1], 0.0)])
    return Series(scrapes, values, values + np.cumsum(drops))
