"""``/metrics`` of a simulated replica, named and labelled as vLLM or Triton name theirs.

vLLM (``model_name``, ``engine`` labels): ``vllm:*`` histograms, counters with ``_total``,
gauges. Triton with the TensorRT-LLM backend (``model``, ``version`` labels): ``nv_*``
counters *without* ``_total`` (prometheus-cpp names them so), the ``nv_trt_llm_*`` gauges
and the ``nv_llm_*_token_len`` histograms. Both add ``process_start_time_seconds`` and
``rolloutd_sim_restarts_total``, which stands in for node_exporter's
``node_systemd_service_restart_total``: the supervisor's count, kept across restarts.
``vllm:num_preemptions_total`` stays 0: admission reserves a whole ``max_seq_len`` per
sequence, so nothing is ever preempted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from rolloutd.sim.stats import EngineStats, Histogram

Flavor = Literal["vllm", "triton"]
FLAVORS: tuple[Flavor, ...] = ("vllm", "triton")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class MetricState:
    """Everything one scrape shows: the process's stats plus live gauges."""

    flavor: Flavor
    model: str
    version: str
    stats: EngineStats
    running: int
    waiting: int
    in_prefill: int
    max_sequences: int
    kv_used_tokens: int
    kv_pool_tokens: int
    tokens_per_block: int
    gpu_count: int
    gpu_memory_bytes: int
    gpu_used_bytes: int
    restarts: int
    replica: str


class EngineCollector(Collector):
    """A prometheus_client collector that renders one replica's ``MetricState``."""

    def __init__(self, state: Callable[[], MetricState | None]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        """The metric families of the current scrape."""
        state = self._state()
        if state is None:
            return
        with state.stats.lock:
            yield from (_vllm(state) if state.flavor == "vllm" else _triton(state))
        start = GaugeMetricFamily(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds."
        )
        start.add_metric([], state.stats.started_at)
        yield start
        restarts = CounterMetricFamily(
            "rolloutd_sim_restarts",
            "Engine restarts by the supervisor (stands in for systemd's restart count).",
            labels=["replica"],
        )
        restarts.add_metric([state.replica], state.restarts)
        yield restarts


_TRITON_COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
)


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition of ``registry``, with Triton's counters named as Triton names
    them (prometheus_client would announce them with a ``_total`` suffix)."""
    text = generate_latest(registry).decode()
    for name in _TRITON_COUNTERS:
        text = text.replace(f"# HELP {name}_total ", f"# HELP {name} ")
        text = text.replace(f"# TYPE {name}_total ", f"# TYPE {name} ")
    return text.encode()


def _histogram(name: str, doc: str, labels: dict[str, str], hist: Histogram) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), hist.cumulative(), hist.sum)
    return family


def _vllm(state: MetricState) -> Iterator[Metric]:
    stats = state.stats
    labels = {"model_name": state.model, "engine": "0"}
    names, values = list(labels), list(labels.values())
    for name, doc, hist in (
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            stats.e2e,
        ),
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            stats.ttft,
        ),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            stats.queue,
        ),
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens),
        (
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        ),
    ):
        yield _histogram(name, doc, labels, hist)
    success = CounterMetricFamily(
        "vllm:request_success",
        "Count of successfully processed requests.",
        labels=[*names, "finished_reason"],
    )
    for reason, count in sorted(stats.finished.items()):
        success.add_metric([*values, reason], count)
    yield success
    for name, doc, value in (
        (
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            stats.preemptions,
        ),
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens_total),
        (
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens_total,
        ),
    ):
        counter = CounterMetricFamily(name, doc, labels=names)
        counter.add_metric(values, value)
        yield counter
    usage = state.kv_used_tokens / state.kv_pool_tokens if state.kv_pool_tokens else 0.0
    for name, doc, gauge in (
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            state.running,
        ),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", state.waiting),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage),
    ):
        family = GaugeMetricFamily(name, doc, labels=names)
        family.add_metric(values, gauge)
        yield family


def _triton(state: MetricState) -> Iterator[Metric]:
    stats = state.stats
    names, values = ["model", "version"], [state.model, state.version]
    for name, doc, value in (
        (
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            stats.success,
        ),
        (
            "nv_inference_count",
            "Number of inferences performed (does not include cached requests)",
            stats.success,
        ),
        (
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            stats.success,
        ),
        (
            "nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds (includes cached requests)",
            stats.request_duration_us,
        ),
        (
            "nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds (includes cached requests)",
            stats.queue_duration_us,
        ),
        (
            "nv_inference_compute_infer_duration_us",
            "Cumulative compute inference duration "
            "in microseconds (does not include cached requests)",
            stats.compute_duration_us,
        ),
    ):
        yield _exact_counter(name, doc, dict(zip(names, values, strict=True)), value)
    failure = Metric(
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        "counter",
    )
    for reason, count in stats.failures.items():
        failure.add_sample(
            "nv_inference_request_failure",
            {"model": state.model, "reason": reason, "version": state.version},
            count,
        )
    yield failure
    pending = GaugeMetricFamily(
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        labels=names,
    )
    pending.add_metric(values, state.waiting)
    yield pending
    labels = dict(zip(names, values, strict=True))
    yield _histogram(
        "nv_inference_first_response_histogram_ms",
        "Duration from request to first response in milliseconds",
        labels,
        stats.first_response_ms,
    )
    yield from _trt_llm(state, names, values)
    for name, kind, hist in (
        ("nv_llm_input_token_len", "total_input_tokens", stats.input_token_len),
        ("nv_llm_output_token_len", "total_output_tokens", stats.output_token_len),
    ):
        yield _histogram(
            name, "TRT LLM response metrics", {**labels, "response_metric_type": kind}, hist
        )
    total = GaugeMetricFamily(
        "nv_gpu_memory_total_bytes", "GPU total memory, in bytes", labels=["gpu_uuid"]
    )
    used = GaugeMetricFamily(
        "nv_gpu_memory_used_bytes", "GPU used memory, in bytes", labels=["gpu_uuid"]
    )
    for index in range(state.gpu_count):
        uuid = f"GPU-sim-{state.replica}-{index}"
        total.add_metric([uuid], state.gpu_memory_bytes)
        used.add_metric([uuid], state.gpu_used_bytes)
    yield total
    yield used


def _trt_llm(state: MetricState, names: list[str], values: list[str]) -> Iterator[Metric]:
    per = state.tokens_per_block
    max_blocks = state.kv_pool_tokens // per
    used_blocks = min(-(-state.kv_used_tokens // per), max_blocks)
    blocks = GaugeMetricFamily(
        "nv_trt_llm_kv_cache_block_metrics",
        "TRT LLM KV cache block metrics",
        labels=["kv_cache_block_type", *names],
    )
    for kind, value in (
        ("max", max_blocks),
        ("free", max_blocks - used_blocks),
        ("used", used_blocks),
        ("tokens_per", per),
        ("fraction", used_blocks / max_blocks if max_blocks else 0.0),
    ):
        blocks.add_metric([kind, *values], value)
    yield blocks
    requests = GaugeMetricFamily(
        "nv_trt_llm_request_metrics", "TRT LLM request metrics", labels=["request_type", *names]
    )
    for kind, value in (
        ("waiting", state.waiting),
        ("context", state.in_prefill),
        ("scheduled", state.running),
        ("max", state.max_sequences),
        ("active", state.running),
    ):
        requests.add_metric([kind, *values], value)
    yield requests


def _exact_counter(name: str, doc: str, labels: dict[str, str], value: float) -> Metric:
    metric = Metric(name, doc, "counter")
    metric.add_sample(name, labels, value)
    return metric
