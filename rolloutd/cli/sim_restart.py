"""``rolloutctl sim restart``: what ``systemctl restart vllm.service`` does, for a simulated box.

The systemd executor writes an environment file for the pinned set and runs its plan's
``restart`` argv; on a real box systemd then starts ``vllm serve ${VLLM_MODEL} $VLLM_ARGS``
from that file. The simulated fleet has no units, so the plans ``sim fleet --deployment
support-70b`` writes name this verb instead: it reads the same file the same way (systemd's
``EnvironmentFile=`` syntax), refuses what vLLM would refuse to start with (a model path
that does not exist, arguments that are not flags), and asks the simulated replica
(``POST /admin/restart``) to restart on the model path, under ``--served-model-name`` (else
the path, as vLLM names it). Everything after that is the executor's own path: it waits for
``/health`` and ``/v1/models`` and checks the digests, as against a real box.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from rolloutd.cli.common import OUTPUT
from rolloutd.errors import BadInput, RolloutdError

# vLLM flags the simulated engine models; the others (kv-cache-dtype, quantization, ...) are
# accepted, as vLLM accepts them, and change nothing in the simulation.
SIMULATED_FLAGS = {
    "max-model-len": "max_model_len",
    "gpu-memory-utilization": "gpu_memory_utilization",
    "served-model-name": "served_model_name",
}
REQUEST_TIMEOUT = 10.0


@click.command("restart")
@click.option("--url", required=True, help="The simulated vLLM replica (http://HOST:PORT).")
@click.option(
    "--env-file",
    "env_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The environment file the systemd executor wrote (VLLM_MODEL, VLLM_ARGS).",
)
@OUTPUT
def restart_command(url: str, env_file: str, output: str) -> None:
    """Restart a simulated vLLM replica on what an environment file pins, as systemd would.

    Reads VLLM_MODEL and VLLM_ARGS from ENV_FILE (the file the systemd executor writes for a
    pinned set), checks that the model path exists, and restarts the replica at URL with
    that path, --served-model-name, --max-model-len and --gpu-memory-utilization (other vLLM
    flags are accepted and not simulated). Returns once the replica restarts; it answers
    /health again after its restart delay. The plans of `rolloutctl sim fleet --deployment
    support-70b` use it as the systemd executor's restart command.

    \b
    Examples:
      rolloutctl sim restart --url http://127.0.0.1:18001 --env-file sim-support/vllm/box-b.env
    """
    base = _checked_url(url)
    values = _read_env_file(Path(env_file))
    config = engine_args(values, env_file)
    state = _restart(base, config)
    data = {
        "url": base,
        "model": config["served_model_name"],
        "model_path": config["model_path"],
        "set": values.get("ROLLOUTD_ARTEFACT_SET"),
        "state": state.get("state"),
    }
    if output == "json":
        click.echo(json.dumps(data))
    else:
        click.echo(
            f"{base} restarting on {data['model_path']} (served as {data['model']})"
            + (f", artefact set {data['set']}" if data["set"] else "")
        )


def engine_args(values: dict[str, str], source: str) -> dict[str, Any]:
    """The simulated engine's restart config from an environment file's ``values``.

    :raises BadInput: VLLM_MODEL is missing or names no file, or VLLM_ARGS is not flags.
    """
    model = values.get("VLLM_MODEL", "").strip()
    if not model:
        raise BadInput.one(source, "VLLM_MODEL", "missing: the file names no model to serve")
    if not Path(model).exists():
        raise BadInput.one(
            source, "VLLM_MODEL", f"{model} does not exist: vLLM would not start on it"
        )
    try:
        flags = parse_flags(values.get("VLLM_ARGS", "").split())
    except ValueError as exc:
        raise BadInput.one(source, "VLLM_ARGS", str(exc)) from None
    config: dict[str, Any] = {"model_path": model, "served_model_name": model}
    for flag, key in SIMULATED_FLAGS.items():
        value = flags.get(flag)
        if value is True:
            raise BadInput.one(source, "VLLM_ARGS", f"--{flag} needs a value")
        if value is not None:
            config[key] = value
    digest = values.get("ROLLOUTD_ARTEFACT_DIGEST")
    if digest:
        config["artefact_digest"] = digest
    return config


def parse_flags(words: list[str]) -> dict[str, str | bool]:
    """``--flag value``, ``--flag=value`` and bare ``--flag`` words as ``{flag: value}``.

    :raises ValueError: a word that is neither a flag nor a flag's value.
    """
    flags: dict[str, str | bool] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("--") or len(word) == 2:
            raise ValueError(f"{word!r} is not a --flag (nor the value of one)")
        name, equals, value = word[2:].partition("=")
        following = words[index + 1] if index + 1 < len(words) else None
        if equals:
            flags[name] = value
        elif following is not None and not following.startswith("--"):
            flags[name] = following
            index += 1
        else:
            flags[name] = True
        index += 1
    return flags


def _checked_url(url: str) -> str:
    """``url`` without a trailing slash.

    :raises BadInput: not an http(s) URL with a host.
    """
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise BadInput.one("--url", "", f"expected the replica's http://HOST:PORT, got {url!r}")
    return url.rstrip("/")


def _read_env_file(path: Path) -> dict[str, str]:
    """The assignments of the environment file at ``path``.

    :raises BadInput: it cannot be read as text.
    """
    from rolloutd.deploy.systemd import read_env_file

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput.one("--env-file", "", f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput.one("--env-file", "", f"cannot read {path}: {why}") from None
    return read_env_file(text)


def _restart(base: str, config: dict[str, Any]) -> dict[str, Any]:
    """Ask the replica at ``base`` to restart with ``config``; returns its state.

    :raises RolloutdError: it cannot be reached, is not a simulated vLLM replica, or
        refuses the config.
    """
    import httpx

    try:
        with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
            state = client.get(f"{base}/admin/state")
            if state.status_code != 200:
                raise RolloutdError(
                    f"{base} is not a simulated replica (GET /admin/state answered "
                    f"{state.status_code})"
                )
            flavor = _json(state).get("flavor")
            if flavor != "vllm":
                raise RolloutdError(
                    f"{base} is a simulated {flavor or 'unknown'} replica, not vLLM: a Triton "
                    "replica changes models through its repository API"
                )
            response = client.post(f"{base}/admin/restart", json={"config": config})
    except httpx.HTTPError as exc:
        raise RolloutdError(f"cannot reach {base}: {type(exc).__name__}: {exc}") from None
    body = _json(response)
    if response.status_code != 200:
        raise RolloutdError(
            f"{base} refused the restart ({response.status_code}): {body.get('error', '')}"
        )
    return body


def _json(response: Any) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
