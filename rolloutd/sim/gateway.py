"""Agent-side counters that a deployment gets from its gateway, per pool.

Engines cannot tell a session from a request, a human escalation from a goodbye, or a tool
call that breaks its schema: the agent gateway can. The traffic generator plays the gateway
and counts here; ``serve()`` exports the counters for Prometheus as
``agent_sessions_total{pool}``, ``agent_escalations_total{pool}``,
``agent_tool_calls_total{pool}``, ``agent_schema_violations_total{pool}`` (and requests,
timeouts, errors as the client saw them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
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


class AgentMetrics(Collector):
    """Thread-safe per-pool counters; also a prometheus_client collector."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {}
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
