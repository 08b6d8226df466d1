"""Reading a vLLM server's ``--config`` YAML and its model's config.json for the capacity plan.

The arithmetic is pure (:mod:`rolloutd.core.vllm_capacity`); this is the shell around it:
read both files, and turn every refusal into a problem naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

from rolloutd.core import capacity as kv
from rolloutd.core.vllm_capacity import VllmCapacity, VllmConfigError, assess, parse_server
from rolloutd.errors import BadInput
from rolloutd.userfiles import read_json_object, read_user_file, safe_yaml

MAX_SERVER_CONFIG_BYTES = 256 * 1024
MAX_MODEL_CONFIG_BYTES = 1024 * 1024


def load_vllm_capacity(
    server_path: Path, model_path: Path, *, weights_gb: float, gpu_memory_gb: float
) -> VllmCapacity:
    """The capacity plan of the server config at ``server_path`` serving the model whose
    config.json is at ``model_path``, with ``weights_gb`` of weights on GPUs of
    ``gpu_memory_gb``.

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
        )
    except VllmConfigError as exc:
        raise BadInput.one(server_source, exc.key, str(exc)) from None
    except kv.CapacityError as exc:
        raise BadInput.one(str(model_path), "", str(exc)) from None
