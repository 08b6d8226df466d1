"""What ``rolloutctl sim fleet`` writes for an operator: artefacts to pin and plans to run.

A first try by hand needs the same things as production, only smaller: the two engine
artefact directories with their engine-config files (to ``rolloutctl artefact pin``), and
the reference plans pointed at the simulated replicas. Each plan copy differs from its
original in :data:`SIM_FIELDS` only, so what an operator validates, drills and starts is the
plan of the README, not a demo variant:

* every replica URL (matched by name) goes to the simulated replica of that name;
* ``router`` becomes the ``file`` router on the weights file the fleet's splitter reads;
* ``metrics`` becomes the ``file`` source on the file the fleet rewrites every few seconds
  (see ``metricsfile``), since a separate ``rolloutd run`` can read a file but not the
  simulator, and there is no Prometheus on a fresh clone;
* a suite gate's ``sampled.capture`` becomes the directory the fleet's agent traffic is
  captured into, so the live-traffic gates replay what the fleet served;
* a ``systemd`` executor's ``restart`` becomes ``rolloutctl sim restart`` of the simulated
  replica (there are no units to restart) and its ``env_file`` a file per replica under the
  fleet's directory (``DIR/vllm/{replica}.env``, where each box has its own
  ``/etc/vllm/vllm.env``): the executor writes the file, runs the command and then waits
  for ``/health`` and ``/v1/models`` and checks the digests exactly as against a real box.

Files a plan names relative to itself (a vLLM capacity section's server YAML and model
config) are copied to the same place relative to the copy, so the copy's fields stay the
original's and still resolve.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

SIM_FIELDS: tuple[str, ...] = (
    "pools.stable/canary.replicas[].url",
    "router",
    "metrics",
    "gates.*.sampled.capture",
    "executor.restart (systemd)",
    "executor.env_file (systemd)",
)
"""The fields a plan copy changes; everything else is the original's."""

STABLE_SET = "atlas-70b-fp8-msl32768"
CANARY_SET = "atlas-70b-fp8-msl8192"
ENGINE_CONFIGS: dict[str, dict[str, Any]] = {
    STABLE_SET: {"max_seq_len": 32768, "kv_cache_free_gpu_mem_fraction": 0.9},
    CANARY_SET: {"max_seq_len": 8192, "kv_cache_free_gpu_mem_fraction": 0.9},
}
"""The engine parameters each set is pinned with: what the simulated Triton reports back
from its loaded config, so a deploy verifies."""

SUPPORT_STABLE_SET = "llama-3.1-70b-q4km-gguf"
SUPPORT_CANARY_SET = "llama-3.1-70b-awq"
SUPPORT_GGUF = "Llama-3.1-70B-Instruct-Q4_K_M.gguf"
SUPPORT_ENGINE_ARGS: dict[str, dict[str, Any]] = {
    SUPPORT_STABLE_SET: {
        "model": SUPPORT_GGUF,
        "max-model-len": 8192,
        "kv-cache-dtype": "fp8",
        "max-num-seqs": 8,
    },
    SUPPORT_CANARY_SET: {
        "max-model-len": 8192,
        "kv-cache-dtype": "fp8",
        "max-num-seqs": 8,
        "quantization": "awq_marlin",
    },
}
"""The second reference deployment's sets (vLLM, ``config/plans/support-70b-awq.yaml``).
``model`` names the file under the set's root vLLM loads (the GGUF); the AWQ set is a
checkpoint directory, loaded as a whole."""


class FleetDirError(ValueError):
    """A plan does not fit the simulated fleet; the message names the plan and the field."""


def model_dir(directory: Path, set_name: str) -> Path:
    """Where the stand-in engine files of ``set_name`` go: ``DIR/models/msl32768``."""
    return directory / "models" / set_name.rsplit("-", 1)[-1]


def engine_config_file(directory: Path, set_name: str) -> Path:
    """Where the engine config of ``set_name`` goes: ``DIR/engine-msl32768.json``."""
    return directory / f"engine-{set_name.rsplit('-', 1)[-1]}.json"


def write_artefacts(
    directory: Path,
    configs: Mapping[str, Mapping[str, Any]] = ENGINE_CONFIGS,
    engine: str = "trtllm",
) -> dict[str, tuple[Path, Path]]:
    """Write each set's stand-in engine files and engine config under ``directory``: a
    TensorRT-LLM engine directory, a GGUF file when the config names one (``model``), else
    a Hugging Face checkpoint directory.

    The same bytes every time, so pinning a set again after a restart finds it identical.

    :returns: ``{set name: (model directory, engine-config file)}``.
    """
    written = {}
    for name, config in configs.items():
        root = model_dir(directory, name)
        (root / "tokenizer").mkdir(parents=True, exist_ok=True)
        (root / "tokenizer" / "tokenizer.json").write_text('{"vocab": 128256}')
        weights = name.encode() * 4096
        if engine == "vllm" and "model" in config:
            (root / str(config["model"])).write_bytes(b"GGUF" + weights)
        else:
            checkpoint = "rank0.engine" if engine == "trtllm" else "model.safetensors"
            (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
            (root / checkpoint).write_bytes(weights)
        config_file = engine_config_file(directory, name)
        config_file.write_text(json.dumps(dict(config), indent=2) + "\n")
        written[name] = (root, config_file)
    return written


def pointed_at_fleet(
    data: Mapping[str, Any],
    urls: Mapping[str, str],
    *,
    weights: Path,
    metrics: Path,
    source: str,
    capture: Path | None = None,
    restart: list[str] | None = None,
    env_file: Path | None = None,
) -> dict[str, Any]:
    """A copy of the plan ``data`` that differs in :data:`SIM_FIELDS` only.

    ``restart`` and ``env_file`` replace a ``systemd`` executor's (``env_file`` may name
    ``{replica}``); other executors reach the simulated replicas through their URLs.

    :raises FleetDirError: a replica of the plan has no simulated replica of its name, or
        its systemd executor would restart real units (no ``restart`` given).
    """
    plan: dict[str, Any] = json.loads(json.dumps(data))  # a deep copy, key order kept
    for pool in ("stable", "canary"):
        for replica in plan["pools"][pool]["replicas"]:
            name = replica.get("name")
            if name not in urls:
                raise FleetDirError(
                    f"{source}: pools.{pool}.replicas: no simulated replica named {name!r} "
                    f"(the fleet has {', '.join(sorted(urls))})"
                )
            replica["url"] = urls[name]
    header = plan["router"].get("session_header", "X-Session-Id")
    plan["router"] = {"driver": "file", "path": str(weights), "session_header": header}
    plan["metrics"] = {"source": "file", "path": str(metrics)}
    for gate in (plan.get("gates") or {}).values():
        if capture is not None and isinstance(gate, dict) and isinstance(gate.get("sampled"), dict):
            gate["sampled"]["capture"] = str(capture)
    executor = plan.get("executor")
    if isinstance(executor, dict) and executor.get("kind") == "systemd":
        if restart is None or env_file is None:
            raise FleetDirError(
                f"{source}: executor: a systemd executor on the simulated fleet needs the "
                "fleet's restart command and environment file"
            )
        executor["env_file"] = str(env_file)
        executor["restart"] = list(restart)
    return plan


def copy_companions(data: Mapping[str, Any], original: Path, copy: Path, root: Path) -> list[Path]:
    """Copy the files ``data`` names relative to its plan file (``capacity.vllm``'s
    ``config`` and ``model_json``) from beside ``original`` to beside ``copy``, so the copy
    keeps those fields; returns where they went.

    :raises FleetDirError: one cannot be read, or would land outside ``root``.
    """
    vllm = (data.get("capacity") or {}).get("vllm") or {}
    written = []
    for key in ("config", "model_json"):
        name = vllm.get(key)
        if not isinstance(name, str) or Path(name).is_absolute():
            continue
        target = (copy.parent / name).resolve()
        if not target.is_relative_to(root.resolve()):
            raise FleetDirError(f"{original}: capacity.vllm.{key}: {name} leads out of {root}")
        try:
            content = (original.parent / name).read_bytes()
        except OSError as exc:
            raise FleetDirError(
                f"{original}: capacity.vllm.{key}: cannot read {name}: {exc.strerror or exc}"
            ) from None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        written.append(target)
    return written


def write_plan(path: Path, original: Path, plan: Mapping[str, Any]) -> None:
    """Write ``plan`` as YAML to ``path``, under a comment naming its original."""
    changed = textwrap.fill(
        f"Changed: {', '.join(SIM_FIELDS)}; everything else is the original's.",
        width=90,
        initial_indent="# ",
        subsequent_indent="# ",
    )
    note = (
        f"# {original} pointed at the simulated fleet (rolloutctl sim fleet).\n"
        f"{changed}\n"
        "# The file metrics source carries a value and a sample count per signal: gates that\n"
        "# need histogram buckets or both pools' counts (latency, compare) stay inconclusive.\n"
    )
    if (plan.get("executor") or {}).get("kind") == "systemd":
        note += (
            "# The systemd executor restarts a simulated box with `rolloutctl sim restart` on\n"
            "# the environment file it writes under the fleet's directory; the rest of its path\n"
            "# (the file, /health, /v1/models naming the model, the digests) is a real box's.\n"
        )
    text = yaml.safe_dump(dict(plan), sort_keys=False, width=100, allow_unicode=True)
    path.write_text(note + text, encoding="utf-8")


def write_env(path: Path, values: Mapping[str, str]) -> None:
    """Write ``NAME=value`` lines a shell can source, in one rename (written last, so its
    presence says the fleet is ready)."""
    partial = path.with_name(f".{path.name}.tmp")
    lines = [f"{name}={_shell_quoted(value)}" for name, value in values.items()]
    partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(partial, path)


def _shell_quoted(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
