"""``SimulatorMetrics``: a MetricsSource that reads the simulated fleet in process.

It answers the gate signals per pool over a window ending at ``now``, without Prometheus.
Windows work on any clock, including a scaled or fake one: every ``measure`` (or ``mark``)
keeps a snapshot of the counters and ledger positions under its ``now``, and a window
``[now - w, now]`` is the difference between the snapshot at ``now`` and the newest one at
or before ``now - w`` (before the first snapshot: everything since the fleet started).

Signals: ``queue_timeout_rate``, ``error_rate`` (samples: requests), ``oom_events``
(OOM crashes of the pool's replicas), ``schema_violation_rate`` (samples: tool calls),
``escalation_rate`` (samples: sessions), ``escalations`` (count; ``raw`` has both pools),
likewise the sessions with a timeout or a schema violation, once per session
(``session_timeout_rate``, ``session_timeouts``, ``session_schema_violation_rate``,
``session_schema_violations``), quantiles ``e2e_latency_p95`` (``e2e_latency`` = p95),
``ttft_p95``, ``queue_time_p95`` (seconds; samples: completed requests),
``sequence_tokens_p99`` (prompt+output),
``prompt_tokens_p99``, ``kv_cache_usage`` (max over the pool's replicas) and ``requests``.
No traffic in the window is a ``MeasurementError``, never a zero.

Load per replica, in simulated time whatever the caller's clock: each snapshot also keeps
the wall time it was taken at (the engines turn wall time into simulated time by their
``time_scale``), so ``load_requests_per_replica`` is the window's requests per simulated
second per replica of the pool, and ``load_inflight_per_replica`` the time its requests
spent in the engines (queued or served) per simulated second per replica: the mean number
in flight, by Little's law.

Per-replica latency by load (``cells``, for a latency gate with ``match_load``): the window
cut into slices, and for each replica and slice the signal's histogram over vLLM's bucket
edges and the replica's mean requests in flight then (Little's law again, at least 1: a
request sees itself). A slice without a snapshot at each end holds no records of its own
and gives no cell: the caller's ticks must be at least as frequent as its slices.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rolloutd.core.stats.matched import Cell
from rolloutd.gates.base import Measurement, MeasurementError, Pool
from rolloutd.gates.load import LOAD_INFLIGHT, LOAD_REQUESTS
from rolloutd.sim.engine import Replica
from rolloutd.sim.gateway import AgentMetrics
from rolloutd.sim.ledger import RequestLedger, RequestRecord
from rolloutd.sim.loadcells import TTFT_EDGES

_QUANTILE = re.compile(
    r"^(e2e_latency|ttft|queue_time|sequence_tokens|prompt_tokens)(?:_p(\d{1,2}(?:\.\d+)?))?$"
)
_DEFAULT_Q = {"e2e_latency": 95.0, "ttft": 95.0, "queue_time": 95.0}
# The once-per-session signals, exposure sessions: the gateway counter each one counts.
_PER_SESSION = {
    "escalation_rate": "escalations",
    "escalations": "escalations",
    "session_timeout_rate": "session_timeouts",
    "session_timeouts": "session_timeouts",
    "session_schema_violation_rate": "session_schema_violations",
    "session_schema_violations": "session_schema_violations",
}


@dataclass(frozen=True)
class _Snapshot:
    positions: dict[int, int] = field(default_factory=dict)
    ooms: dict[str, int] = field(default_factory=dict)
    agent: dict[str, dict[str, int]] = field(default_factory=dict)
    wall: float | None = None
    """``time.monotonic()`` when taken (None: the source's start)."""


@dataclass(frozen=True)
class _Window:
    records: list[RequestRecord]
    ooms: dict[str, int]
    agent: dict[str, dict[str, int]]
    wall_seconds: float


class SimulatorMetrics:
    """Gate signals of a simulated fleet, per pool, over windows of any clock."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        gateway: AgentMetrics | None = None,
        *,
        max_snapshots: int = 10_000,
    ) -> None:
        self.replicas = list(replicas)
        self.gateway = gateway if gateway is not None else AgentMetrics()
        ledgers = {id(replica.ledger): replica.ledger for replica in self.replicas}
        self._ledgers: dict[int, RequestLedger] = ledgers
        self._times: list[datetime] = []
        self._snapshots: list[_Snapshot] = []
        self._max = max_snapshots
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def mark(self, now: datetime) -> None:
        """Keep a snapshot under ``now`` (``measure`` does this too)."""
        self._at(now)

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The value of ``signal`` on ``pool`` over ``window`` ending at ``now``.

        :raises MeasurementError: an unknown signal, or no data in the window.
        """
        query = f"sim:{signal}{{pool={pool!r}}}[{_span(window)}]"
        seen = self._between(now - window, now)
        records = [r for r in seen.records if r.pool == pool]
        nothing = MeasurementError(
            f"no requests on {pool} in the last {_span(window)}", query=query
        )
        if signal == "requests":
            return Measurement(float(len(records)), len(records), query)
        if signal in (LOAD_REQUESTS, LOAD_INFLIGHT):
            if not records:
                raise nothing
            return self._load(signal, pool, records, seen.wall_seconds, query)
        if signal in ("queue_timeout_rate", "error_rate"):
            if not records:
                raise nothing
            bad = ("timeout",) if signal == "queue_timeout_rate" else ("error", "unavailable")
            count = sum(1 for r in records if r.outcome in bad)
            return Measurement(count / len(records), len(records), query, {"events": count})
        if signal == "oom_events":
            names = [r.name for r in self.replicas if r.pool == pool]
            if not names:
                raise MeasurementError(f"no replicas in the {pool} pool", query=query)
            per = {name: seen.ooms.get(name, 0) for name in names}
            return Measurement(float(sum(per.values())), len(names), query, {"replicas": per})
        if signal == "schema_violation_rate" or signal in _PER_SESSION:
            return self._agent(signal, pool, seen.agent, query, window)
        if signal == "kv_cache_usage":
            done = [r.kv_usage for r in records if r.outcome == "ok"]
            if not done:
                raise nothing
            return Measurement(max(done), len(done), query)
        match = _QUANTILE.match(signal)
        if match is None:
            raise MeasurementError(f"the simulator has no signal {signal!r}", query=query)
        base, given = match.groups()
        q = float(given) if given else _DEFAULT_Q.get(base, 99.0)
        values = [_VALUE[base](r) for r in records if _counts(base, r)]
        if not values:
            raise nothing
        return Measurement(_quantile(values, q / 100.0), len(values), query)

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """Per replica of ``pool`` and ``slice`` of ``window`` ending at ``now``: the
        histogram of ``signal`` (a latency) and the mean requests in flight.

        :raises MeasurementError: ``signal`` is not a latency, or ``slice`` is not positive.
        """
        query = f"sim:{signal}{{pool={pool!r}}}[{_span(window)}] by replica, {_span(slice)}"
        match = _QUANTILE.match(signal)
        if match is None or match.group(1) not in _DEFAULT_Q:
            raise MeasurementError(f"the simulator has no latency {signal!r} by load", query=query)
        if slice <= timedelta(0):
            raise MeasurementError("a slice must be longer than 0s", query=query)
        value = _VALUE[match.group(1)]
        replicas = [r for r in self.replicas if r.pool == pool]
        self._at(now)
        cells = []
        start = now - window
        while start < now:
            end = min(start + slice, now)
            seen = self._between(start, end)
            start = end
            if seen.wall_seconds <= 0:
                continue
            for replica in replicas:
                records = [
                    r for r in seen.records if r.replica == replica.name and r.outcome == "ok"
                ]
                if not records:
                    continue
                simulated = seen.wall_seconds / replica.time_scale
                inflight = sum(max(r.e2e_s, r.queue_s) for r in records) / simulated
                buckets = _cumulative([value(r) for r in records])
                cells.append(Cell(pool, max(1.0, inflight), buckets, replica.name))
        return cells

    def _load(
        self,
        signal: str,
        pool: Pool,
        records: list[RequestRecord],
        wall_seconds: float,
        query: str,
    ) -> Measurement:
        replicas = [r for r in self.replicas if r.pool == pool]
        if not replicas:
            raise MeasurementError(f"no replicas in the {pool} pool", query=query)
        if wall_seconds <= 0:
            raise MeasurementError("the window holds no time to divide by", query=query)
        simulated = wall_seconds / replicas[0].time_scale
        if signal == LOAD_REQUESTS:
            total = float(len(records))
        else:
            total = sum(max(r.e2e_s, r.queue_s) for r in records)
        raw = {"replicas": len(replicas), "simulated_seconds": simulated}
        return Measurement(total / simulated / len(replicas), len(records), query, raw)

    def _agent(
        self,
        signal: str,
        pool: Pool,
        agent: dict[str, dict[str, int]],
        query: str,
        window: timedelta,
    ) -> Measurement:
        counts = agent.get(pool, {})
        if signal == "schema_violation_rate":
            calls = counts.get("tool_calls", 0)
            if not calls:
                raise MeasurementError(
                    f"no tool calls on {pool} in the last {_span(window)}", query=query
                )
            bad = counts.get("schema_violations", 0)
            return Measurement(bad / calls, calls, query, {"events": bad})
        counter = _PER_SESSION[signal]
        sessions = counts.get("sessions", 0)
        events = counts.get(counter, 0)
        if signal.endswith("_rate"):
            if not sessions:
                raise MeasurementError(
                    f"no sessions on {pool} in the last {_span(window)}", query=query
                )
            return Measurement(events / sessions, sessions, query, {"events": events})
        both = {p: agent.get(p, {}) for p in ("canary", "stable")}
        if not any(c.get("sessions", 0) for c in both.values()):
            raise MeasurementError(f"no sessions in the last {_span(window)}", query=query)
        raw = {
            counter: {p: c.get(counter, 0) for p, c in both.items()},
            "sessions": {p: c.get("sessions", 0) for p, c in both.items()},
        }
        return Measurement(float(events), sessions, query, raw)

    def _between(self, start: datetime, end: datetime) -> _Window:
        last = self._at(end)
        with self._lock:
            index = bisect.bisect_right(self._times, start) - 1
            first = self._snapshots[index] if index >= 0 else _Snapshot()
        records = [
            record
            for key, ledger in self._ledgers.items()
            for record in ledger.between(first.positions.get(key, 0), last.positions[key])
        ]
        ooms = {name: n - first.ooms.get(name, 0) for name, n in last.ooms.items()}
        agent = {
            pool: {k: v - first.agent.get(pool, {}).get(k, 0) for k, v in counts.items()}
            for pool, counts in last.agent.items()
        }
        since = self._started if first.wall is None else first.wall
        wall = (self._started if last.wall is None else last.wall) - since
        return _Window(records, ooms, agent, wall)

    def _at(self, now: datetime) -> _Snapshot:
        with self._lock:
            if self._times and now <= self._times[-1]:
                # The past is not re-read: the newest snapshot at or before `now` stands.
                index = bisect.bisect_right(self._times, now) - 1
                return (
                    self._snapshots[index]
                    if index >= 0
                    else _Snapshot(dict.fromkeys(self._ledgers, 0))
                )
            snapshot = _Snapshot(
                positions={key: ledger.position() for key, ledger in self._ledgers.items()},
                ooms={replica.name: replica.ooms for replica in self.replicas},
                agent=self.gateway.snapshot(),
                wall=time.monotonic(),
            )
            self._times.append(now)
            self._snapshots.append(snapshot)
            if len(self._times) > self._max:
                del self._times[0], self._snapshots[0]
            return snapshot


_VALUE: dict[str, Callable[[RequestRecord], float]] = {
    "e2e_latency": lambda r: r.e2e_s,
    "ttft": lambda r: r.ttft_s,
    "queue_time": lambda r: r.queue_s,
    "sequence_tokens": lambda r: float(r.prompt_tokens + r.output_tokens),
    "prompt_tokens": lambda r: float(r.prompt_tokens),
}


def _counts(base: str, record: RequestRecord) -> bool:
    if base in ("sequence_tokens", "prompt_tokens"):
        return record.prompt_tokens > 0
    return record.outcome == "ok"


def _cumulative(values: list[float]) -> tuple[tuple[float, float], ...]:
    """``values`` as a cumulative histogram over vLLM's TTFT bucket edges, +Inf last."""
    ordered = sorted(values)
    edges = (*TTFT_EDGES, math.inf)
    return tuple((edge, float(bisect.bisect_right(ordered, edge))) for edge in edges)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _span(window: timedelta) -> str:
    seconds = int(window.total_seconds())
    parts = [
        (seconds // 86400, "d"),
        (seconds % 86400 // 3600, "h"),
        (seconds % 3600 // 60, "m"),
        (seconds % 60, "s"),
    ]
    text = "".join(f"{n}{unit}" for n, unit in parts if n)
    return text or f"{window.total_seconds():g}s"
