"""KV-cache arithmetic: how many ``max_seq_len`` reservations fit on a GPU box.

This is the capacity plan behind every rollout of an engine config: resident sequences
follow from GPU memory, the weights, the KV bytes of one token and the reserved sequence
length. Pure functions over frozen data, used by ``rolloutctl capacity``, by plan
validation (does the target concurrency fit?) and by the simulated fleet.

Assumptions, which reproduce the reference deployment (70B FP8 on 4x L40S):

* The engine may use ``memory_fraction`` (vLLM ``gpu_memory_utilization``, TRT-LLM
  ``kv_cache_free_gpu_mem_fraction`` taken of the whole card) of every GPU, 0.9 by default.
* Out of that budget come the weights (split over the tensor-parallel group) and a fixed
  activation/workspace overhead per GPU (CUDA graphs, NCCL buffers, the activation peak of
  a profiling pass), 1 GiB by default; the rest is the KV pool.
* A K and a V vector per layer per KV head: ``2 * layers * kv_heads * head_dim * dtype``
  bytes per token. Tensor parallelism wider than the KV head count replicates heads.
* GPUs beyond one tensor-parallel group run further model instances (data parallel), each
  with its own copy of the weights.

The reference model keeps its KV cache in FP16 (2 bytes) beside FP8 weights: that yields
~9 resident sequences at 32,768 tokens and ~36 at 8,192. An FP8 KV cache would double both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

GB = 1_000_000_000
GiB = 1 << 30

# Bounds on the inputs: far beyond any real deployment, yet small enough that every figure
# stays exact and fits a float when shown in GB.
MAX_GB = 100_000
"""The most GB of weights or of memory per GPU the arithmetic takes."""
MAX_GPUS = 65_536
"""The most GPUs (and the widest tensor parallelism) of one replica."""
MAX_COUNT = 2**31 - 1
"""The largest layer, head, head_dim or token count: the engines hold them in 32-bit
integers (TensorRT-LLM's max_seq_len, vLLM's max_model_len)."""


class CapacityError(ValueError):
    """The inputs describe a deployment that cannot exist or cannot hold one sequence."""


@dataclass(frozen=True)
class ModelShape:
    """The attention geometry that sizes the KV cache."""

    num_layers: int
    num_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not 1 <= value <= MAX_COUNT:
                raise CapacityError(
                    f"{field.name} must be from 1 to {MAX_COUNT}, got {shown(value)}"
                )

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """Read a HuggingFace ``config.json`` (Llama-style keys).

        ``num_key_value_heads`` defaults to ``num_attention_heads`` (no GQA); ``head_dim``
        defaults to ``hidden_size / num_attention_heads``.

        :raises CapacityError: a key is missing or not an integer from 1 to :data:`MAX_COUNT`.
        """
        layers = model_int(config, "num_hidden_layers")
        kv_key = "num_key_value_heads" if "num_key_value_heads" in config else "num_attention_heads"
        kv_heads = model_int(config, kv_key)
        if "head_dim" in config:
            head_dim = model_int(config, "head_dim")
        else:
            hidden = model_int(config, "hidden_size")
            heads = model_int(config, "num_attention_heads")
            if hidden % heads:
                raise CapacityError(f"hidden_size {hidden} is not a multiple of {heads} heads")
            head_dim = hidden // heads
        return cls(num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim)


@dataclass(frozen=True)
class Deployment:
    """One engine replica: a model on a box of GPUs, and how the engine may use them."""

    shape: ModelShape
    weight_bytes: int
    gpu_count: int
    gpu_memory_bytes: int
    tensor_parallel: int
    kv_dtype_bytes: int = 2
    memory_fraction: float = 0.9
    overhead_bytes_per_gpu: int = GiB
    tokens_per_block: int = 64

    def __post_init__(self) -> None:
        if not 1 <= self.gpu_count <= MAX_GPUS:
            raise CapacityError(f"gpu_count must be from 1 to {MAX_GPUS}, got {self.gpu_count}")
        for name in ("weight_bytes", "gpu_memory_bytes"):
            if not 0 < getattr(self, name) <= MAX_GB * GB:
                raise CapacityError(f"{name} must be above 0 and at most {MAX_GB} GB")
        if self.tensor_parallel < 1 or self.gpu_count % self.tensor_parallel:
            raise CapacityError(
                f"gpu_count {self.gpu_count} is not a multiple of tensor_parallel "
                f"{self.tensor_parallel}"
            )
        if not 0.0 < self.memory_fraction <= 1.0:
            raise CapacityError(f"memory_fraction must be in (0, 1], got {self.memory_fraction}")
        if self.kv_dtype_bytes < 1 or self.tokens_per_block < 1:
            raise CapacityError("kv_dtype_bytes and tokens_per_block must be positive")


@dataclass(frozen=True)
class CapacityReport:
    """The capacity plan of one deployment at one ``max_seq_len``."""

    max_seq_len: int
    kv_bytes_per_token: int
    sequence_bytes: int
    kv_pool_bytes: int
    kv_pool_tokens: int
    resident_sequences: int
    instances: int
    memory_budget_bytes: int
    """What the engine may use of one instance's GPUs (``memory_fraction`` of them)."""
    weight_bytes: int
    overhead_bytes_per_gpu: int
    """Subtracted on every GPU before the KV pool: activations, CUDA graphs, NCCL buffers."""


REFERENCE_SHAPE = ModelShape(num_layers=80, num_kv_heads=8, head_dim=128)
"""A 70B Llama-style model: 80 layers, 8 KV heads (GQA), head_dim 128."""

REFERENCE_DEPLOYMENT = Deployment(
    shape=REFERENCE_SHAPE,
    weight_bytes=70 * GB,
    gpu_count=4,
    gpu_memory_bytes=48 * GB,
    tensor_parallel=4,
    kv_dtype_bytes=2,
)
"""The reference replica: 70B FP8 weights (~70 GB), FP16 KV cache, 4x L40S 48 GB, TP 4."""


def kv_bytes_per_token(shape: ModelShape, kv_dtype_bytes: int, tensor_parallel: int = 1) -> int:
    """Bytes of K and V for one token over all layers of one model instance."""
    heads = max(shape.num_kv_heads, tensor_parallel)
    return 2 * shape.num_layers * heads * shape.head_dim * kv_dtype_bytes


def kv_pool_bytes(deployment: Deployment) -> int:
    """Bytes left for the KV cache in one model instance after weights and overhead.

    :raises CapacityError: the weights and overhead alone exceed the memory budget.
    """
    tp = deployment.tensor_parallel
    budget = memory_budget_bytes(deployment)
    pool = budget - deployment.weight_bytes - tp * deployment.overhead_bytes_per_gpu
    if pool <= 0:
        raise CapacityError(
            f"no room for a KV cache: {deployment.weight_bytes / GB:.1f} GB of weights and "
            f"{tp * deployment.overhead_bytes_per_gpu / GB:.1f} GB of overhead exceed the "
            f"{budget / GB:.1f} GB budget"
        )
    return pool


def memory_budget_bytes(deployment: Deployment) -> int:
    """What the engine may use of one instance's GPUs: ``memory_fraction`` of their memory."""
    tp = deployment.tensor_parallel
    return int(tp * deployment.gpu_memory_bytes * deployment.memory_fraction)


def sequence_bytes(deployment: Deployment, max_seq_len: int) -> int:
    """The KV reservation of one sequence of ``max_seq_len`` tokens, rounded up to blocks."""
    if max_seq_len < 1:
        raise CapacityError(f"max_seq_len must be positive, got {max_seq_len}")
    block = deployment.tokens_per_block
    tokens = -(-max_seq_len // block) * block
    return tokens * _token_bytes(deployment)


def resident_sequences(deployment: Deployment, max_seq_len: int) -> int:
    """How many ``max_seq_len`` reservations fit at once, over all model instances."""
    per_instance = kv_pool_bytes(deployment) // sequence_bytes(deployment, max_seq_len)
    return per_instance * _instances(deployment)


def max_seq_len_for(deployment: Deployment, concurrency: int) -> int:
    """The longest ``max_seq_len`` (a whole number of blocks) that keeps ``concurrency``
    sequences resident.

    :raises CapacityError: not even one block per sequence fits.
    """
    if concurrency < 1:
        raise CapacityError(f"concurrency must be positive, got {concurrency}")
    per_instance = -(-concurrency // _instances(deployment))
    tokens = kv_pool_bytes(deployment) // (per_instance * _token_bytes(deployment))
    blocks = tokens // deployment.tokens_per_block
    if blocks < 1:
        raise CapacityError(f"{concurrency} sequences do not fit even at one block each")
    return blocks * deployment.tokens_per_block


def plan(deployment: Deployment, max_seq_len: int) -> CapacityReport:
    """Every figure of the capacity plan at ``max_seq_len``, for reports and the simulator."""
    pool = kv_pool_bytes(deployment)
    token = _token_bytes(deployment)
    return CapacityReport(
        max_seq_len=max_seq_len,
        kv_bytes_per_token=token,
        sequence_bytes=sequence_bytes(deployment, max_seq_len),
        kv_pool_bytes=pool,
        kv_pool_tokens=pool // token * _instances(deployment),
        resident_sequences=resident_sequences(deployment, max_seq_len),
        instances=_instances(deployment),
        memory_budget_bytes=memory_budget_bytes(deployment),
        weight_bytes=deployment.weight_bytes,
        overhead_bytes_per_gpu=deployment.overhead_bytes_per_gpu,
    )


KV_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


def deployment_of(engine: Any) -> Deployment:
    """A :class:`Deployment` from a plan's ``capacity.engine`` section (or anything shaped so).

    :raises CapacityError: a figure is out of range (see :class:`Deployment`).
    """
    return Deployment(
        shape=ModelShape(engine.num_layers, engine.num_kv_heads, engine.head_dim),
        weight_bytes=bytes_of_gb(engine.weights_gb, "weights_gb"),
        gpu_count=engine.gpus,
        gpu_memory_bytes=bytes_of_gb(engine.gpu_memory_gb, "gpu_memory_gb"),
        tensor_parallel=engine.tensor_parallel,
        kv_dtype_bytes=KV_DTYPE_BYTES[engine.kv_dtype],
        memory_fraction=engine.memory_fraction,
    )


def bytes_of_gb(gb: float, name: str) -> int:
    """``gb`` gigabytes in bytes; ``name`` says which figure in the message.

    :raises CapacityError: ``gb`` is not a finite number above 0 and at most :data:`MAX_GB`.
    """
    if not (math.isfinite(gb) and 0 < gb <= MAX_GB):
        raise CapacityError(f"{name} must be above 0 and at most {MAX_GB} GB, got {gb:g}")
    return int(gb * GB)


def _token_bytes(deployment: Deployment) -> int:
    return kv_bytes_per_token(
        deployment.shape, deployment.kv_dtype_bytes, deployment.tensor_parallel
    )


def _instances(deployment: Deployment) -> int:
    return deployment.gpu_count // deployment.tensor_parallel


def model_int(config: Mapping[str, Any], key: str) -> int:
    """A model config.json's positive integer ``key``.

    :raises CapacityError: missing, not an integer, or out of range; the message names it.
    """
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise CapacityError(
            f"model config: {key} must be an integer from 1 to {MAX_COUNT}, got {shown(value)}"
        )
    return value


def shown(value: object) -> str:
    """``value`` as a message quotes it, cut short when long."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"
