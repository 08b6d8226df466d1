"""Triton's model repository API (``--model-control-mode=explicit``) on a simulated replica.

``load`` takes a ModelConfig override as a JSON string; the sim honours ``max_seq_len``,
the version policy, the memory fraction, paged KV cache, the queue timeout and an
``artefact_digest``, so a load really changes the replica's capacity (32,768 -> 8,192 takes
it from 9 to 36 resident sequences). A config whose weights do not fit leaves the model
UNAVAILABLE with a CUDA out-of-memory reason. Errors are HTTP 400 ``{"error": "..."}``, as
Triton answers them; ``load`` blocks until the model is loaded, as Triton's does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rolloutd.core.capacity import CapacityError
from rolloutd.sim.config import ConfigError, parse_triton_config
from rolloutd.sim.process import Reply

if TYPE_CHECKING:
    from rolloutd.sim.engine import Replica


def index(replica: Replica, body: object) -> Reply:
    """``POST /v2/repository/index``: every version with its state and reason."""
    ready_only = isinstance(body, dict) and body.get("ready") is True
    with replica.lock:
        config, alive = replica.config, replica.process is not None
        state, reason = replica.model_state, replica.model_reason
    entries = []
    for version in replica.available_versions:
        if version == config.version:
            entry_state, entry_reason = (state, reason) if alive else ("UNAVAILABLE", reason)
        else:
            entry_state, entry_reason = "UNAVAILABLE", "unloaded"
        if ready_only and entry_state != "READY":
            continue
        entries.append(
            {
                "name": config.model,
                "version": str(version),
                "state": entry_state,
                "reason": entry_reason,
            }
        )
    return Reply(200, entries)


def load(replica: Replica, name: str, body: object) -> Reply:
    """``POST /v2/repository/models/{name}/load`` with an optional config override."""
    with replica.lock:
        current, alive, override = (
            replica.config,
            replica.process is not None,
            replica.loaded_override,
        )
    if name != current.model:
        return _error(f"failed to load '{name}', failed to poll from model repository")
    if not alive:
        return _error(f"failed to load '{name}', the server is restarting")
    parameters = body.get("parameters", {}) if isinstance(body, dict) else {}
    text = parameters.get("config") if isinstance(parameters, dict) else None
    if text is not None and not isinstance(text, str):
        return _error(f"failed to load '{name}', parameters.config must be a JSON string")
    new, document = current, override
    if text is not None:
        try:
            new, document = parse_triton_config(text, current, replica.available_versions)
        except ConfigError as exc:
            return _error(f"failed to load '{name}', {exc}")
    try:
        if new.capacity().resident_sequences < 1:
            raise CapacityError(f"not one {new.max_seq_len}-token sequence fits")
    except CapacityError as exc:
        with replica.lock:
            replica.model_state = "UNAVAILABLE"
            replica.model_reason = f"CUDA runtime error in ::cudaMallocAsync: out of memory ({exc})"
        return _error(f"failed to load '{name}', {replica.model_reason}")
    with replica.lock:
        replica.model_state, replica.model_reason = "LOADING", "loading"
    time.sleep(replica.load_delay_s * replica.time_scale)
    replica.reload(new, dict(document))
    return Reply(200)


def unload(replica: Replica, name: str) -> Reply:
    """``POST /v2/repository/models/{name}/unload``."""
    with replica.lock:
        if name != replica.config.model:
            return _error(f"failed to unload '{name}', no version is available")
        replica.model_state, replica.model_reason = "UNAVAILABLE", "unloaded"
    return Reply(200)


def ready(replica: Replica, name: str, version: str | None) -> Reply:
    """``GET /v2/models/{name}[/versions/{v}]/ready``: 200 when that version serves."""
    with replica.lock:
        config, alive, state = replica.config, replica.process is not None, replica.model_state
    serving = alive and state == "READY" and name == config.model
    return Reply(200 if serving and version in (None, str(config.version)) else 400)


def server_ready(replica: Replica) -> bool:
    """``/v2/health/ready``: the process is up and no model is loading or failed (an
    unloaded model does not count, as with Triton's strict readiness)."""
    with replica.lock:
        if replica.process is None or replica.model_state == "LOADING":
            return False
        return replica.model_state == "READY" or replica.model_reason == "unloaded"


def metadata(replica: Replica, name: str) -> Reply:
    """``GET /v2/models/{name}``."""
    config = replica.config
    if name != config.model:
        return _error(f"Request for unknown model: '{name}' is not found")
    return Reply(
        200,
        {
            "name": name,
            "versions": [str(config.version)],
            "platform": "tensorrt_llm",
            "inputs": [],
            "outputs": [],
        },
    )


def model_config(replica: Replica, name: str) -> Reply:
    """``GET /v2/models/{name}/config``: the loaded config, so a deploy executor can verify
    what runs (including the ``artefact_digest`` the load carried)."""
    with replica.lock:
        config, override = replica.config, dict(replica.loaded_override)
    if name != config.model:
        return _error(f"Request for unknown model: '{name}' is not found")
    parameters: dict[str, Any] = dict(override.get("parameters") or {})
    values = {
        "max_seq_len": config.max_seq_len,
        "kv_cache_free_gpu_mem_fraction": config.deployment.memory_fraction,
        "paged_kv_cache": str(config.paged_kv_cache).lower(),
    }
    if config.artefact_digest is not None:
        values["artefact_digest"] = config.artefact_digest
    parameters.update({key: {"string_value": str(value)} for key, value in values.items()})
    return Reply(
        200,
        {
            **override,
            "name": config.model,
            "backend": "tensorrtllm",
            "max_batch_size": config.capacity().resident_sequences,
            "version_policy": {"specific": {"versions": [config.version]}},
            "max_seq_len": config.max_seq_len,
            "parameters": parameters,
            "dynamic_batching": {
                "default_queue_policy": {
                    "timeout_action": "REJECT",
                    "default_timeout_microseconds": int(config.queue_timeout_s * 1e6),
                }
            },
        },
    )


def _error(message: str) -> Reply:
    return Reply(400, {"error": message})
