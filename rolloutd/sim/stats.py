"""An engine process's own statistics: the counters and histograms behind ``/metrics``.

They live as long as the engine process: a restart (after an OOM) starts a fresh
``EngineStats``, so counters drop to zero exactly as a restarted vLLM or Triton shows them.
Bucket boundaries are the engines' own (vLLM's latency buckets and 1-2-5 token buckets;
the TensorRT-LLM backend's token-length buckets).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence

from rolloutd.sim.ledger import RequestRecord

VLLM_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
VLLM_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
TRITON_TOKEN_BUCKETS = (10.0, 50.0, 100.0, 500.0, 1000.0)
"""The TensorRT-LLM backend's fixed buckets: a 6,000-token prompt lands in +Inf."""
TRITON_FIRST_RESPONSE_MS_BUCKETS = (100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 30000.0, 60000.0)
"""As set with ``model_metrics { histogram_options }``; Triton's defaults stop at 5 s."""

TRITON_FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def buckets_1_2_5(maximum: int) -> tuple[float, ...]:
    """vLLM's token buckets: 1, 2, 5, 10, 20, 50, ... up to ``maximum``."""
    found: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > maximum:
                return tuple(found)
            found.append(float(value))
        exponent += 1


class Histogram:
    """Bucket counts, a sum and a count, Prometheus style."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``."""
        pairs: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(str, self.buckets), "+Inf"), self.counts, strict=True):
            running += count
            pairs.append((bound, float(running)))
        return pairs


class EngineStats:
    """Counters and histograms of one engine process; thread-safe."""

    def __init__(self, max_seq_len: int, started_at: float | None = None) -> None:
        self.started_at = time.time() if started_at is None else started_at
        self.lock = threading.Lock()
        self.finished: dict[str, int] = dict.fromkeys(("stop", "length", "abort", "error"), 0)
        self.failures: dict[str, int] = dict.fromkeys(TRITON_FAILURE_REASONS, 0)
        self.success = 0
        self.request_duration_us = 0.0
        self.queue_duration_us = 0.0
        self.compute_duration_us = 0.0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.preemptions = 0
        self.e2e = Histogram(VLLM_LATENCY_BUCKETS)
        self.queue = Histogram(VLLM_LATENCY_BUCKETS)
        self.ttft = Histogram(VLLM_TTFT_BUCKETS)
        self.prompt_tokens = Histogram(buckets_1_2_5(max_seq_len))
        self.generation_tokens = Histogram(buckets_1_2_5(max_seq_len))
        self.first_response_ms = Histogram(TRITON_FIRST_RESPONSE_MS_BUCKETS)
        self.input_token_len = Histogram(TRITON_TOKEN_BUCKETS)
        self.output_token_len = Histogram(TRITON_TOKEN_BUCKETS)

    def succeed(self, finish_reason: str, request: RequestRecord) -> None:
        """Count a finished request, as the ledger records it (simulated seconds)."""
        queue_s, ttft_s, e2e_s = request.queue_s, request.ttft_s, request.e2e_s
        prompt_tokens, output_tokens = request.prompt_tokens, request.output_tokens
        with self.lock:
            self.success += 1
            self.finished[finish_reason] = self.finished.get(finish_reason, 0) + 1
            self.request_duration_us += e2e_s * 1e6
            self.queue_duration_us += queue_s * 1e6
            self.compute_duration_us += (e2e_s - queue_s) * 1e6
            self.prompt_tokens_total += prompt_tokens
            self.generation_tokens_total += output_tokens
            self.e2e.observe(e2e_s)
            self.queue.observe(queue_s)
            self.ttft.observe(ttft_s)
            self.prompt_tokens.observe(prompt_tokens)
            self.generation_tokens.observe(output_tokens)
            self.first_response_ms.observe(ttft_s * 1000.0)
            self.input_token_len.observe(prompt_tokens)
            self.output_token_len.observe(output_tokens)

    def fail(self, triton_reason: str, vllm_reason: str | None) -> None:
        """Count a failed request: Triton's failure reason, and vLLM's finished_reason when
        vLLM counts such a request at all (it does not count requests refused up front)."""
        with self.lock:
            self.failures[triton_reason] += 1
            if vllm_reason is not None:
                self.finished[vllm_reason] += 1
