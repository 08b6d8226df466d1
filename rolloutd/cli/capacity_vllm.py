"""``rolloutctl capacity --vllm-config``: the capacity plan of a vLLM server's own YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from rolloutd.cli.common import emit
from rolloutd.core.capacity import GB
from rolloutd.errors import BadInput

# Flags that the server YAML decides; giving one as well would be two truths.
_DECIDED_BY_YAML = ("gpus", "tensor_parallel", "kv_dtype", "memory_fraction", "max_seq_lens")


def show_vllm_capacity(
    vllm_config: str,
    model_config: str | None,
    weights_gb: float,
    gpu_memory_gb: float,
    cuda_graph_gb: float | None,
    output: str,
) -> None:
    """Print the plan of ``vllm_config`` (see :mod:`rolloutd.core.vllm_capacity`).

    :raises BadInput: a flag the YAML decides was given, --model-config or --weights-gb is
        missing, or a file is wrong (named with its key).
    """
    from rolloutd.vllmfile import load_vllm_capacity

    context = click.get_current_context()
    for name in _DECIDED_BY_YAML:
        if context.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            flag = (
                "--tp" if name == "tensor_parallel" else "--" + name.rstrip("s").replace("_", "-")
            )
            raise BadInput.one(flag, "", f"comes from {vllm_config} with --vllm-config; drop it")
    if model_config is None:
        raise BadInput.one("--model-config", "", "--vllm-config needs the model's config.json")
    if context.get_parameter_source("weights_gb") is not ParameterSource.COMMANDLINE:
        raise BadInput.one(
            "--weights-gb", "", "--vllm-config needs the weights' size (the GGUF or checkpoint)"
        )
    result = load_vllm_capacity(
        Path(vllm_config),
        Path(model_config),
        weights_gb=weights_gb,
        gpu_memory_gb=gpu_memory_gb,
        cuda_graph_gb=cuda_graph_gb,
    )
    server, report = result.server, result.report
    data: dict[str, Any] = {
        "vllm_config": vllm_config,
        "model_config": model_config,
        "server": {
            "max_model_len": server.max_model_len,
            "gpu_memory_utilization": server.gpu_memory_utilization,
            "kv_cache_dtype": server.kv_cache_dtype,
            "kv_dtype_bytes": server.kv_dtype_bytes,
            "enable_prefix_caching": server.enable_prefix_caching,
            "max_num_seqs": server.max_num_seqs,
            "max_num_batched_tokens": server.max_num_batched_tokens,
            "enforce_eager": server.enforce_eager,
            "tensor_parallel_size": server.tensor_parallel_size,
            "block_size": server.block_size,
        },
        "gpu_memory_bytes": int(gpu_memory_gb * GB),
        "memory_budget_bytes": report.memory_budget_bytes,
        "weight_bytes": report.weight_bytes,
        "non_torch_bytes_per_gpu": result.non_torch_bytes,
        "activation_peak_bytes_per_gpu": result.activation_peak_bytes,
        "kv_pool_bytes": report.kv_pool_bytes,
        "kv_pool_tokens": report.kv_pool_tokens,
        "kv_bytes_per_token": report.kv_bytes_per_token,
        "sequence_bytes": report.sequence_bytes,
        "resident_sequences": report.resident_sequences,
        "concurrent_at_max_model_len": result.concurrent_at_max_len,
        "headroom_bytes_per_gpu": result.headroom_bytes,
        "headroom_needed_bytes_per_gpu": result.headroom_needed_bytes,
        "warnings": [{"key": key, "message": message} for key, message in result.warnings],
    }

    def human(d: dict[str, Any]) -> None:
        s = d["server"]
        click.echo(
            f"{vllm_config}: max-model-len {s['max_model_len']:,}, gpu-memory-utilization "
            f"{s['gpu_memory_utilization']:g}, KV {s['kv_cache_dtype']}, TP "
            f"{s['tensor_parallel_size']}, max-num-seqs {s['max_num_seqs']}, "
            f"max-num-batched-tokens {s['max_num_batched_tokens']:,}, prefix caching "
            f"{'on' if s['enable_prefix_caching'] else 'off'}"
        )
        tp = s["tensor_parallel_size"]
        click.echo(
            f"budget {d['memory_budget_bytes'] / GB:.2f} GB - weights {d['weight_bytes'] / GB:.2f}"
            f" GB - non-torch {tp * d['non_torch_bytes_per_gpu'] / GB:.2f} GB - activation peak "
            f"{tp * d['activation_peak_bytes_per_gpu'] / GB:.2f} GB = KV pool "
            f"{d['kv_pool_bytes'] / GB:.2f} GB ({d['kv_pool_tokens']:,} tokens)"
        )
        click.echo(
            f"resident sequences at {s['max_model_len']:,}: {d['resident_sequences']} "
            f"({d['sequence_bytes'] / GB:.2f} GB each); running at once: "
            f"{d['concurrent_at_max_model_len']}"
        )
        click.echo(
            f"outside the budget per GPU: {d['headroom_bytes_per_gpu'] / GB:.2f} GB; CUDA graphs "
            f"need about {d['headroom_needed_bytes_per_gpu'] / GB:.2f} GB"
        )
        for warning in d["warnings"]:
            click.echo(f"{vllm_config}: warning: {warning['key']}: {warning['message']}")

    emit(data, output, human)
