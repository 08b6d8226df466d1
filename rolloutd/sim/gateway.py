"""Agent-side counters that a deployment gets from its gateway, per pool.

Engines cannot tell a session from a request, a human escalation from a goodbye, or a tool
call that breaks its schema: the agent gateway can. The traffic generator plays the gateway
and counts here; ``serve()`` exports the counters for Prometheus as
``agent_sessions_total{pool}``, ``agent_escalations_total{pool}``,
``agent_tool_calls_total{pool}``, ``agent_schema_violations_total{pool}`` (and requests,
timeouts, errors as the client saw them).

It also keeps two histograms per pool that stock engines lack: the end-to-end duration of
each answered model request (``agent_request_duration_seconds``; stock Triton has only a
mean) and its prompt+output length (``agent_request_tokens``; the engines' token histograms
stop at 1,000 or 5,000 tokens, below the ``max_seq_len`` the capacity gate checks). The
simulated gateway observes the engine's simulated duration, not the wall clock, because the
simulated engines run faster than real time.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

COUNTERS = (
    "sessions",
    "escalations",
    "tool_calls",
    "schema_violations",
    "requests",
    "timeouts",
    "errors",
)
_HELP = {
    "sessions": "Agent sessions started, by the pool that served them.",
    "escalations": "Sessions handed over to a human.",
    "tool_calls": "Tool calls the model made.",
    "schema_violations": "Tool calls whose arguments violate the tool's JSON schema.",
    "requests": "Model requests sent by the gateway.",
    "timeouts": "Model requests that timed out (queue timeout or client timeout).",
    "errors": "Model requests that failed otherwise.",
}

HISTOGRAMS: dict[str, tuple[float, ...]] = {
    "request_duration_seconds": (
        *(0.25, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20),
        *(25, 30, 40, 60, 90, 120),
    ),
    "request_tokens": (
        *(256, 512, 1024, 2048, 3072, 4096, 5120, 6144, 6656, 7168, 7680, 8192),
        *(10240, 12288, 16384, 24576, 32768, 49152, 65536, 131072),
    ),
}
_HISTOGRAM_HELP = {
    "request_duration_seconds": "End-to-end duration of answered model requests, seconds.",
    "request_tokens": "Prompt plus output tokens of answered model requests.",
}


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
        self._counts: dict[str, dict[str, int]] = {}
        self._histograms: dict[tuple[str, str], _Histogram] = {}
        self._lock = threading.Lock()
        self._server: Any = None

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
            family = CounterMetricFamily(f"agent_{counter}", _HELP[counter], labels=["pool"])
            for pool in sorted(counts):
                family.add_metric([pool], counts[pool][counter])
            yield family
        with self._lock:
            histograms = {key: h.exposition() for key, h in self._histograms.items()}
        for name in HISTOGRAMS:
            histogram = HistogramMetricFamily(
                f"agent_{name}", _HISTOGRAM_HELP[name], labels=["pool"]
            )
            for (pool, of), (buckets, total) in sorted(histograms.items()):
                if of == name:
                    histogram.add_metric([pool], buckets, total)
            yield histogram

    def serve(self, port: int = 0) -> str:
        """Export ``/metrics`` on 127.0.0.1 (``port`` 0: a free one); returns the base URL."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        self._server = server
        return f"http://127.0.0.1:{server.server_port}"

    def close(self) -> None:
        """Stop the exporter started by ``serve()``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
