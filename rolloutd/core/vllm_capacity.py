"""Capacity from a vLLM server's own config: its ``--config`` YAML and the model's config.json.

A vLLM team's truth is the YAML it starts the server with (keys are the CLI flags' long
names; ``max-model-len`` and ``max_model_len`` both work). This module reads that mapping
(the shell parses the file), checks it the way vLLM would, and turns it into the capacity
plan of :mod:`rolloutd.core.capacity`: resident sequences at ``max-model-len`` and the KV
pool at ``gpu-memory-utilization``, plus a warning when the memory left outside the
engine's budget cannot hold what the engine allocates there later.

The memory model, per GPU of the tensor-parallel group (vLLM 0.6 to 0.20):

* **The budget** is ``total x gpu-memory-utilization``. vLLM's start-up profile charges
  to it the weights, the memory outside PyTorch's allocator (``non_torch_memory``) and the
  *activation peak* of one forward pass over ``max-num-batched-tokens`` tokens; the rest
  becomes the KV pool (the worker logs exactly this split: "model weights take …;
  non_torch_memory takes …; PyTorch activation peak memory takes …; the rest of the memory
  reserved for KV Cache is …", vllm-project/vllm#14452, #11251).
* **The activation peak** is estimated as the largest tensors of a Llama MLP over the
  profiled batch: the fused gate/up projection's output, ``tokens x 2 x intermediate_size``
  activations of the model dtype (2 bytes). It grows with ``max-num-batched-tokens``, which
  the profiling run uses (vLLM's "No available memory for the cache blocks" write-ups; vLLM's
  tuning guide tells to lower ``max_num_batched_tokens`` to free memory). Attention
  workspaces and the sampler are smaller at these sizes and not counted.
* **non_torch_memory** is taken as 0.5 GiB: vLLM logs 0.15-0.39 GiB on one GPU
  (vllm#15340, #14452, #11251); NCCL buffers add to it under tensor parallelism.
* **CUDA graphs** are captured *after* the KV pool is allocated and, before vLLM 0.21, are
  not charged to the budget: they live in ``total x (1 - gpu-memory-utilization)``
  (a maintainer's answer in vllm#11251; vLLM's capture log says "If out-of-memory error
  occurs during cudagraph capture, consider decreasing gpu_memory_utilization", vllm#11349).
  The headroom needed there is :data:`CUDA_GRAPH_RESERVE` (3 GiB) unless ``enforce-eager``:
  captures log 0.2-1.4 GiB of graphs (vllm#11349, sglang#8538 quoting vLLM 0.9.2), and the
  CUDA context and library workspaces outside the profile take another 0.5-1 GiB. The
  reference vLLM deployment brackets it: a 38 GB model on a 48 GB L40S ran at 0.92 (3.84 GB
  left) and died of OOM at 0.95 (2.4 GB) once graphs were captured. From vLLM 0.21 the graph
  memory is profiled inside the budget; with such a build the warning is conservative.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rolloutd.core.capacity import (
    GB,
    MAX_COUNT,
    CapacityError,
    CapacityReport,
    Deployment,
    GiB,
    ModelShape,
    model_int,
    plan,
    shown,
)

NON_TORCH_BYTES = GiB // 2
"""Memory outside PyTorch's allocator charged to the budget per GPU (CUDA context share,
cuBLAS workspaces)."""
CUDA_GRAPH_RESERVE = 3 * GiB
"""What CUDA graph capture and the context need per GPU outside the budget."""
ACTIVATION_BYTES = 2
"""Bytes of one activation: the model dtype, fp16 or bf16."""

KV_CACHE_DTYPES = {"auto": None, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
DTYPES = {"auto": 2, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4}

# The flags a vLLM server YAML may hold (``vllm serve --help``, 0.6 to 0.10), in dashes.
# Those that size memory are read; the rest are accepted so that a real config passes.
_READ = {
    "max-model-len": "int",
    "gpu-memory-utilization": "fraction",
    "kv-cache-dtype": "kv",
    "enable-prefix-caching": "bool",
    "max-num-seqs": "int",
    "max-num-batched-tokens": "int",
    "enforce-eager": "bool",
    "tensor-parallel-size": "int",
    "pipeline-parallel-size": "int",
    "block-size": "int",
    "enable-chunked-prefill": "bool",
    "dtype": "dtype",
    "cpu-offload-gb": "number",
}
_ACCEPTED = frozenset(
    {
        "model",
        "served-model-name",
        "host",
        "port",
        "tokenizer",
        "tokenizer-mode",
        "quantization",
        "load-format",
        "download-dir",
        "trust-remote-code",
        "revision",
        "tokenizer-revision",
        "seed",
        "swap-space",
        "max-seq-len-to-capture",
        "disable-log-requests",
        "disable-log-stats",
        "uvicorn-log-level",
        "api-key",
        "chat-template",
        "enable-auto-tool-choice",
        "tool-call-parser",
        "response-role",
        "speculative-model",
        "num-speculative-tokens",
        "speculative-config",
        "distributed-executor-backend",
        "max-logprobs",
        "generation-config",
        "root-path",
        "ssl-keyfile",
        "ssl-certfile",
        "allowed-origins",
        "lora-modules",
        "enable-lora",
        "max-loras",
        "max-lora-rank",
        "guided-decoding-backend",
        "scheduling-policy",
        "disable-custom-all-reduce",
        "num-scheduler-steps",
        "rope-scaling",
        "rope-theta",
        "hf-overrides",
        "compilation-config",
        "override-generation-config",
        "preemption-mode",
        "limit-mm-per-prompt",
        "disable-frontend-multiprocessing",
        "enable-prompt-tokens-details",
        "max-parallel-loading-workers",
        "config-format",
    }
)
KNOWN_KEYS = frozenset(_READ) | _ACCEPTED


class VllmConfigError(CapacityError):
    """A key or value of the server config that vLLM would refuse; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


@dataclass(frozen=True)
class VllmServer:
    """The memory-sizing settings of one vLLM server, with vLLM's defaults filled in."""

    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    kv_dtype_bytes: int
    enable_prefix_caching: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    tensor_parallel_size: int
    block_size: int
    model: str | None


@dataclass(frozen=True)
class VllmCapacity:
    """What a vLLM server config means for one GPU box, and what looks wrong with it."""

    server: VllmServer
    report: CapacityReport
    activation_peak_bytes: int
    non_torch_bytes: int
    headroom_bytes: int
    """Per GPU, outside the budget: ``total x (1 - gpu-memory-utilization)``."""
    headroom_needed_bytes: int
    """Per GPU, what CUDA graphs and the context need there (0 plus context when eager)."""
    concurrent_at_max_len: int
    """Sequences of ``max-model-len`` running at once: resident ones, capped by max-num-seqs."""
    warnings: tuple[tuple[str, str], ...]
    """(key, message) for each finding; the key is the YAML key it concerns."""


def parse_server(data: Mapping[str, Any], model_config: Mapping[str, Any]) -> VllmServer:
    """Read a server YAML's mapping; ``model_config`` fills ``max-model-len`` when absent.

    :raises VllmConfigError: an unknown key, a value of the wrong type or range, or a
        combination vLLM refuses (``max-num-batched-tokens`` below ``max-model-len``
        without chunked prefill).
    """
    values: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("_", "-")
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise VllmConfigError(str(raw_key), f"not a vLLM server flag{hint}")
        if key in values:
            raise VllmConfigError(str(raw_key), "given twice (with dashes and underscores)")
        values[key] = _checked(str(raw_key), _READ.get(key), value)
    if "max-model-len" in values:
        max_model_len = values["max-model-len"]
    else:
        max_model_len = model_int(model_config, "max_position_embeddings")
    chunked = values.get("enable-chunked-prefill", False)
    batched = values.get("max-num-batched-tokens", 512 if chunked else max(max_model_len, 2048))
    if not chunked and batched < max_model_len:
        # vLLM's SchedulerConfig refuses this: a prompt of max-model-len could never run.
        raise VllmConfigError(
            "max-num-batched-tokens",
            f"{batched} is below max-model-len {max_model_len}; vLLM refuses to start "
            "unless enable-chunked-prefill is set",
        )
    if values.get("pipeline-parallel-size", 1) != 1:
        raise VllmConfigError("pipeline-parallel-size", "only 1 is supported by this arithmetic")
    kv_dtype = values.get("kv-cache-dtype", "auto")
    dtype_bytes = DTYPES[values.get("dtype", "auto")]
    return VllmServer(
        max_model_len=max_model_len,
        gpu_memory_utilization=values.get("gpu-memory-utilization", 0.9),
        kv_cache_dtype=kv_dtype,
        kv_dtype_bytes=KV_CACHE_DTYPES[kv_dtype] or dtype_bytes,
        enable_prefix_caching=values.get("enable-prefix-caching", False),
        max_num_seqs=values.get("max-num-seqs", 256),
        max_num_batched_tokens=batched,
        enforce_eager=values.get("enforce-eager", False),
        tensor_parallel_size=values.get("tensor-parallel-size", 1),
        block_size=values.get("block-size", 16),
        model=str(values["model"]) if "model" in values else None,
    )


def assess(
    server: VllmServer,
    model_config: Mapping[str, Any],
    *,
    weight_bytes: int,
    gpu_memory_bytes: int,
    graph_reserve_bytes: int = CUDA_GRAPH_RESERVE,
) -> VllmCapacity:
    """The capacity plan of ``server`` with the model of ``model_config`` (a HuggingFace
    config.json) whose weights take ``weight_bytes`` over the group, on GPUs of
    ``gpu_memory_bytes``. See the module docstring for the memory model.

    :raises CapacityError: the model config lacks a key, or a figure is out of range.
    :raises VllmConfigError: the budget cannot hold the weights and the activation peak.
    """
    shape = ModelShape.from_hf_config(model_config)
    intermediate = model_int(model_config, "intermediate_size")
    tp = server.tensor_parallel_size
    activation = server.max_num_batched_tokens * 2 * math.ceil(intermediate / tp)
    activation *= ACTIVATION_BYTES
    deployment = Deployment(
        shape=shape,
        weight_bytes=weight_bytes,
        gpu_count=tp,
        gpu_memory_bytes=gpu_memory_bytes,
        tensor_parallel=tp,
        kv_dtype_bytes=server.kv_dtype_bytes,
        memory_fraction=server.gpu_memory_utilization,
        overhead_bytes_per_gpu=NON_TORCH_BYTES + activation,
        tokens_per_block=server.block_size,
    )
    try:
        report = plan(deployment, server.max_model_len)
    except CapacityError as exc:
        raise VllmConfigError("gpu-memory-utilization", f"{exc}; vLLM cannot start") from None
    headroom = gpu_memory_bytes - int(gpu_memory_bytes * server.gpu_memory_utilization)
    needed = 0 if server.enforce_eager else graph_reserve_bytes
    concurrent = min(report.resident_sequences, server.max_num_seqs)
    warnings = _findings(server, report, headroom, needed, gpu_memory_bytes)
    return VllmCapacity(
        server=server,
        report=report,
        activation_peak_bytes=activation,
        non_torch_bytes=NON_TORCH_BYTES,
        headroom_bytes=headroom,
        headroom_needed_bytes=needed,
        concurrent_at_max_len=concurrent,
        warnings=tuple(warnings),
    )


def _findings(
    server: VllmServer, report: CapacityReport, headroom: int, needed: int, gpu_bytes: int
) -> list[tuple[str, str]]:
    found = []
    if headroom < needed:
        highest = math.floor((1 - needed / gpu_bytes) * 100) / 100
        found.append(
            (
                "gpu-memory-utilization",
                f"{server.gpu_memory_utilization:g} leaves {headroom / GB:.2f} GB per GPU "
                f"outside the engine's budget; CUDA graph capture needs about "
                f"{needed / GB:.2f} GB there: expect an OOM once graphs are captured "
                f"(at most {highest:.2f}, or enforce-eager)",
            )
        )
    if report.resident_sequences < 1:
        found.append(
            (
                "max-model-len",
                f"the KV pool holds {report.kv_pool_tokens:,} tokens, less than one sequence "
                f"of {server.max_model_len:,}: vLLM refuses to start",
            )
        )
    elif report.resident_sequences < server.max_num_seqs:
        found.append(
            (
                "max-num-seqs",
                f"{server.max_num_seqs} sequences may run, but only "
                f"{report.resident_sequences} of max-model-len {server.max_model_len:,} fit "
                f"the KV pool ({report.kv_pool_tokens:,} tokens); long requests will be "
                "preempted",
            )
        )
    return found


def _checked(key: str, kind: str | None, value: Any) -> Any:
    """``value`` of a read key, checked for its kind; accepted keys pass as they are."""
    if kind is None:
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise VllmConfigError(key, f"must be true or false, got {shown(value)}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise VllmConfigError(
                key, f"must be an integer from 1 to {MAX_COUNT}, got {shown(value)}"
            )
        return value
    if kind in ("fraction", "number"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value):
            raise VllmConfigError(key, f"must be a number, got {shown(value)}")
        if kind == "fraction" and not 0 < value <= 1:
            raise VllmConfigError(key, f"must be above 0 and at most 1, got {value:g}")
        return float(value)
    choices = KV_CACHE_DTYPES if kind == "kv" else DTYPES
    if value not in choices:
        raise VllmConfigError(key, f"must be one of {', '.join(choices)}, got {shown(value)}")
    return value
