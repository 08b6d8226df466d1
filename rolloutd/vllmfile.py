"""Reading a vLLM server's ``--config`` YAML and its model's config.json for the capacity plan.

The arithmetic is pure (:mod:`rolloutd.core.vllm_capacity`); this is the shell around it:
read both files, and turn every refusal into a problem naming the file and the key.
"""

from __future__ import annotations

import math
from pathlib import Path

from rolloutd.core import capacity as kv
from rolloutd.core.plan import Plan
from rolloutd.core.vllm_capacity import (
    CUDA_GRAPH_RESERVE,
    VllmCapacity,
    VllmConfigError,
    assess,
    parse_server,
)
from rolloutd.errors import BadInput, Problem
from rolloutd.userfiles import read_json_object, read_user_file, safe_yaml

MAX_SERVER_CONFIG_BYTES = 256 * 1024
MAX_MODEL_CONFIG_BYTES = 1024 * 1024


def load_vllm_capacity(
    server_path: Path,
    model_path: Path,
    *,
    weights_gb: float,
    gpu_memory_gb: float,
    cuda_graph_gb: float | None = None,
) -> VllmCapacity:
    """The capacity plan of the server config at ``server_path`` serving the model whose
    config.json is at ``model_path``, with ``weights_gb`` of weights on GPUs of
    ``gpu_memory_gb``; ``cuda_graph_gb`` replaces the default CUDA graph reserve (the
    "Graph capturing finished ... took N GiB" of the engine's own log, plus its context).

    :raises BadInput: a file cannot be read or parsed, a key is unknown, a value is wrong,
        or the budget cannot hold the model; the problem names the file and the key.
    """
    server_source = str(server_path)
    text = read_user_file(
        server_path,
        expected="a vLLM server YAML",
        what="a server config",
        limit=MAX_SERVER_CONFIG_BYTES,
    )
    data = safe_yaml(text, server_source, what="YAML (a vLLM server config)")
    if not isinstance(data, dict):
        raise BadInput.one(
            server_source, "", "expected a mapping of vLLM flags (max-model-len: 8192 ...)"
        )
    model = read_json_object(
        model_path,
        expected="a HuggingFace config.json",
        what="a model config",
        limit=MAX_MODEL_CONFIG_BYTES,
    )
    try:
        server = parse_server(data, model)
    except VllmConfigError as exc:
        raise BadInput.one(server_source, exc.key, str(exc)) from None
    except kv.CapacityError as exc:
        raise BadInput.one(str(model_path), "", str(exc)) from None
    try:
        return assess(
            server,
            model,
            weight_bytes=kv.bytes_of_gb(weights_gb, "weights_gb"),
            gpu_memory_bytes=kv.bytes_of_gb(gpu_memory_gb, "gpu_memory_gb"),
            graph_reserve_bytes=(
                CUDA_GRAPH_RESERVE
                if cuda_graph_gb is None
                else kv.bytes_of_gb(cuda_graph_gb, "cuda_graph_gb")
            ),
        )
    except VllmConfigError as exc:
        raise BadInput.one(server_source, exc.key, str(exc)) from None
    except kv.CapacityError as exc:
        raise BadInput.one(str(model_path), "", str(exc)) from None


def plan_findings(plan: Plan, source: str) -> tuple[list[Problem], list[Problem]]:
    """The problems and warnings of a plan whose ``capacity.vllm`` names the canary's server
    YAML: the files must load, the server must accept the plan's ``max_seq_len``, and the
    canary pool should hold ``target_concurrency x active_share`` sequences of that length.
    Paths are relative to the plan file ``source`` (to the working directory when the plan
    is not a file).
    """
    capacity = plan.capacity
    if capacity is None or capacity.vllm is None:
        return [], []
    files = capacity.vllm
    base = Path(source).parent if Path(source).is_file() else Path()
    server_path = base / files.config
    try:
        result = load_vllm_capacity(
            server_path,
            base / files.model_json,
            weights_gb=files.weights_gb,
            gpu_memory_gb=files.gpu_memory_gb,
            cuda_graph_gb=files.cuda_graph_gb,
        )
    except BadInput as exc:
        return list(exc.problems), []
    server = result.server
    if capacity.max_seq_len > server.max_model_len:
        message = (
            f"{capacity.max_seq_len} is above the server's max-model-len "
            f"{server.max_model_len} ({server_path}): longer requests are refused"
        )
        return [Problem(source, "capacity.max_seq_len", message)], []
    warnings = [Problem(str(server_path), key, message) for key, message in result.warnings]
    replicas = len(plan.pools.canary.replicas)
    needed = math.ceil(capacity.target_concurrency * capacity.active_share)
    block = server.block_size
    sequence_tokens = -(-capacity.max_seq_len // block) * block
    per_replica = min(server.max_num_seqs, result.report.kv_pool_tokens // sequence_tokens)
    if per_replica * replicas < needed:
        warnings.append(
            Problem(
                source,
                "capacity",
                f"{capacity.target_concurrency} sessions x {capacity.active_share:g} active "
                f"need {needed} sequences at once, but {replicas} canary replica(s) run "
                f"{per_replica * replicas} of max_seq_len {capacity.max_seq_len} under "
                f"{server_path} (KV pool {result.report.kv_pool_tokens:,} tokens, max-num-seqs "
                f"{server.max_num_seqs}); requests will queue",
            )
        )
    return [], warnings
