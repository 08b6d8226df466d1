"""Agent-side counters that a deployment gets from its gateway, per pool.

Engines cannot tell a session from a request, a human escalation from a goodbye, or a tool
call that breaks its schema: the agent gateway can. The traffic generator plays the gateway
and counts here; ``serve()`` exports the counters for Prometheus as
``agent_sessions_total{pool}``, ``agent_escalations_total{pool}``,
``agent_tool_calls_total{pool}``, ``agent_schema_violations_total{pool}``, the sessions
with a timeout or a schema violation (``agent_session_timeouts_total{pool}``,
``agent_session_schema_violations_total{pool}``, once per session: the generator knows its
sessions, so it needs none of the reference exporter's session memory) and requests,
timeouts, errors as the client saw them.

It also keeps two histograms per pool that stock engines lack: the end-to-end duration of
each answered model request (``agent_request_duration_seconds``; stock Triton has only a
mean) and its prompt+output length (``agent_request_tokens``; the engines' token histograms
stop at 1,000 or 5,000 tokens, below the ``max_seq_len`` the capacity gate checks). The
simulated gateway observes the engine's simulated duration, not the wall clock, because the
simulated engines run faster than real time.

What the series are called, their HELP, labels and buckets, and what counts, is the contract in
``rolloutd.gateway`` (with the reference exporter a real gateway embeds); this module only
counts the generator's events against it.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rolloutd import gateway as contract

# The contract lives in rolloutd.gateway; this module keys it by the short names ``add`` and
# ``observe`` take ("sessions", "request_duration_seconds").
_COUNTERS = {
    spec.name.removeprefix("agent_").removesuffix("_total"): spec for spec in contract.COUNTERS
}
_HISTOGRAMS = {spec.name.removeprefix("agent_"): spec for spec in contract.HISTOGRAMS}
COUNTERS = tuple(_COUNTERS)
HISTOGRAMS: dict[str, tuple[float, ...]] = {key: spec.buckets for key, spec in _HISTOGRAMS.items()}


class _Histogram:
    """Per-bucket counts (not cumulative) and the sum, for one pool and one histogram."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def exposition(self) -> tuple[list[tuple[str, float]], float]:
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += count
            # Prometheus' own spelling of bounds: 1.0, 0.25, +Inf.
            buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), float(cumulative)))
        return buckets, self.total


class AgentMetrics(Collector):
    """Thread-safe per-pool counters; also a prometheus_client collector."""

    def __init__(self) -> None:
        # Both pools' series exist from the start, as the contract's reference exporter
        # makes them: a pool with no traffic yet reads 0, it is not absent.
        self._counts: dict[str, dict[str, int]] = {
            p: dict.fromkeys(COUNTERS, 0) for p in contract.POOLS
        }
        self._histograms: dict[tuple[str, str], _Histogram] = {
            (p, name): _Histogram(bounds)
            for p in contract.POOLS
            for name, bounds in HISTOGRAMS.items()
        }
        self._lock = threading.Lock()
        self._exporter: contract.Exporter | None = None

    def add(self, pool: str, counter: str, amount: int = 1) -> None:
        """Count ``amount`` more ``counter`` events on ``pool``.

        :raises KeyError: ``counter`` is not one of ``COUNTERS``.
        """
        if counter not in COUNTERS:
            raise KeyError(f"unknown agent counter {counter!r}; known: {', '.join(COUNTERS)}")
        with self._lock:
            counts = self._counts.setdefault(pool, dict.fromkeys(COUNTERS, 0))
            counts[counter] += amount

    def observe(self, pool: str, histogram: str, value: float) -> None:
        """Record one observation of ``histogram`` (a key of ``HISTOGRAMS``) on ``pool``.

        :raises KeyError: ``histogram`` is not one of ``HISTOGRAMS``.
        """
        bounds = HISTOGRAMS.get(histogram)
        if bounds is None:
            known = ", ".join(HISTOGRAMS)
            raise KeyError(f"unknown agent histogram {histogram!r}; known: {known}")
        with self._lock:
            self._histograms.setdefault((pool, histogram), _Histogram(bounds)).observe(value)

    def count(self, pool: str, counter: str) -> int:
        """The current value of one counter (0 for a pool never seen)."""
        with self._lock:
            return self._counts.get(pool, {}).get(counter, 0)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """A copy of every counter: ``{pool: {counter: value}}``."""
        with self._lock:
            return {pool: dict(counts) for pool, counts in self._counts.items()}

    def collect(self) -> Iterator[Metric]:
        """The counters as ``agent_<counter>_total{pool}`` families."""
        counts = self.snapshot()
        for counter in COUNTERS:
            spec = _COUNTERS[counter]
            family = CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
            for pool in sorted(counts):
                family.add_metric([pool], counts[pool][counter])
            yield family
        with self._lock:
            histograms = {key: h.exposition() for key, h in self._histograms.items()}
        for name, spec in _HISTOGRAMS.items():
            histogram = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels))
            for (pool, of), (buckets, total) in sorted(histograms.items()):
                if of == name:
                    histogram.add_metric([pool], buckets, total)
            yield histogram

    def serve(self, port: int = 0) -> str:
        """Export ``/metrics`` on 127.0.0.1 (``port`` 0: a free one); returns the base URL."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self._exporter = contract.Exporter(registry, port, "127.0.0.1")
        return self._exporter.url

    def close(self) -> None:
        """Stop the exporter started by ``serve()``."""
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None
