"""What a simulated replica runs, and how deploy-time configs change it.

``EngineConfig`` is the replica's engine setup: the model and its capacity plan, the
``max_seq_len`` a rollout changes, paged or contiguous KV cache, the queue timeout. Two
ways to change it, as on the real engines: a Triton ``load`` with a model-config override
(``parse_triton_config``) and a vLLM restart with new engine arguments
(``apply_engine_args``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutd.core.capacity import REFERENCE_DEPLOYMENT, CapacityReport, Deployment, plan
from rolloutd.sim.scheduler import ServiceModel


class ConfigError(ValueError):
    """A load config or engine arguments the engine would refuse; the message says why."""


@dataclass(frozen=True)
class EngineConfig:
    """One replica's engine setup. Durations are simulated seconds."""

    model: str = "atlas-70b"
    version: int = 1
    deployment: Deployment = REFERENCE_DEPLOYMENT
    max_seq_len: int = 32_768
    paged_kv_cache: bool = True
    queue_timeout_s: float = 20.0
    output_tokens_median: int = 300
    service: ServiceModel = field(default_factory=ServiceModel)
    artefact_digest: str | None = None
    model_path: str | None = None

    def capacity(self) -> CapacityReport:
        """The capacity plan at this config's ``max_seq_len``."""
        return plan(self.deployment, self.max_seq_len)

    def as_dict(self) -> dict[str, Any]:
        """The config as JSON-ready data, with its capacity plan."""
        report = self.capacity()
        return {
            "model": self.model,
            "version": self.version,
            "max_seq_len": self.max_seq_len,
            "paged_kv_cache": self.paged_kv_cache,
            "queue_timeout_s": self.queue_timeout_s,
            "memory_fraction": self.deployment.memory_fraction,
            "artefact_digest": self.artefact_digest,
            "model_path": self.model_path,
            "resident_sequences": report.resident_sequences,
            "kv_pool_tokens": report.kv_pool_tokens,
        }


REFERENCE_STABLE = EngineConfig()
"""The reference stable build: atlas-70b FP8, max_seq_len 32,768 (~9 resident sequences)."""
REFERENCE_CANARY = dataclasses.replace(REFERENCE_STABLE, max_seq_len=8_192)
"""The reference change: max_seq_len 8,192 with paged KV cache (~36 resident sequences)."""


def parse_triton_config(
    text: str, current: EngineConfig, available_versions: tuple[int, ...]
) -> tuple[EngineConfig, dict[str, Any]]:
    """Apply a Triton ``load`` config override (a ModelConfig as a JSON string).

    Honoured: ``max_seq_len`` (top level or ``parameters.max_seq_len.string_value``),
    ``version_policy.specific.versions`` / ``latest``, ``parameters.
    kv_cache_free_gpu_mem_fraction``, ``parameters.paged_kv_cache``, ``dynamic_batching.
    default_queue_policy.default_timeout_microseconds`` and an ``artefact_digest`` (top
    level or in ``parameters``). Returns the new config and the parsed override.

    :raises ConfigError: not a JSON object, a bad value, or a version not in the repository.
    """
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"failed to parse the model config override: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError("the model config override must be a JSON object")
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ConfigError("parameters must be an object of {name: {string_value}}")
    changes: dict[str, Any] = {}
    seq = document.get("max_seq_len", _parameter(parameters, "max_seq_len"))
    if seq is not None:
        changes["max_seq_len"] = _integer("max_seq_len", seq)
    version = _version(document.get("version_policy"), available_versions)
    if version is not None:
        changes["version"] = version
    fraction = _parameter(parameters, "kv_cache_free_gpu_mem_fraction")
    if fraction is not None:
        changes["deployment"] = _fraction(current.deployment, fraction)
    paged = document.get("paged_kv_cache", _parameter(parameters, "paged_kv_cache"))
    if paged is not None:
        changes["paged_kv_cache"] = str(paged).lower() in ("true", "1", "yes")
    policy = document.get("dynamic_batching", {}).get("default_queue_policy", {})
    timeout_us = policy.get("default_timeout_microseconds") if isinstance(policy, dict) else None
    if timeout_us is not None:
        changes["queue_timeout_s"] = _integer("default_timeout_microseconds", timeout_us) / 1e6
    digest = document.get("artefact_digest", _parameter(parameters, "artefact_digest"))
    if digest is not None:
        changes["artefact_digest"] = str(digest)
    return dataclasses.replace(current, **changes), document


def apply_engine_args(current: EngineConfig, args: Mapping[str, Any]) -> EngineConfig:
    """vLLM-style engine arguments for a restart: ``max_model_len`` (or ``max_seq_len``),
    ``gpu_memory_utilization``, ``paged_kv_cache``, ``queue_timeout_s``, ``artefact_digest``,
    ``model_path`` (the directory the engine loads, reported as ``root`` by ``/v1/models``),
    ``served_model_name`` (the id ``/v1/models`` shows and requests must name).

    :raises ConfigError: an unknown argument or a bad value.
    """
    changes: dict[str, Any] = {}
    for key, value in args.items():
        if key in ("max_model_len", "max_seq_len"):
            changes["max_seq_len"] = _integer(key, value)
        elif key == "gpu_memory_utilization":
            changes["deployment"] = _fraction(current.deployment, value)
        elif key == "paged_kv_cache":
            changes["paged_kv_cache"] = bool(value)
        elif key == "queue_timeout_s":
            changes["queue_timeout_s"] = float(value)
        elif key == "artefact_digest":
            changes["artefact_digest"] = str(value)
        elif key == "model_path":
            changes["model_path"] = str(value)
        elif key == "served_model_name":
            if not str(value):
                raise ConfigError("served_model_name: expected a name, got an empty one")
            changes["model"] = str(value)
        else:
            raise ConfigError(f"unknown engine argument {key!r}")
    return dataclasses.replace(current, **changes)


def _parameter(parameters: Mapping[str, Any], name: str) -> Any:
    entry = parameters.get(name)
    return entry.get("string_value") if isinstance(entry, dict) else entry


def _integer(name: str, value: Any) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    if number < 1:
        raise ConfigError(f"{name}: expected a positive integer, got {number}")
    return number


def _fraction(deployment: Deployment, value: Any) -> Deployment:
    try:
        fraction = float(str(value))
    except ValueError:
        raise ConfigError(f"memory fraction: expected a number, got {value!r}") from None
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"memory fraction: expected a number in (0, 1], got {fraction:g}")
    return dataclasses.replace(deployment, memory_fraction=fraction)


def _version(policy: Any, available: tuple[int, ...]) -> int | None:
    if policy is None:
        return None
    if not isinstance(policy, dict):
        raise ConfigError("version_policy must be an object")
    if "specific" in policy:
        versions = (
            policy["specific"].get("versions", []) if isinstance(policy["specific"], dict) else []
        )
        if not versions:
            raise ConfigError("version_policy.specific.versions must list at least one version")
        wanted = [_integer("version_policy.specific.versions", v) for v in versions]
        missing = [v for v in wanted if v not in available]
        if missing:
            raise ConfigError(
                f"version {missing[0]} is not in the model repository "
                f"(available: {', '.join(map(str, available))})"
            )
        return max(wanted)
    return max(available)
