"""The ``systemd`` executor: a vLLM server run by a systemd unit, redeployed by its env file.

A vLLM box runs ``vllm serve`` under a unit whose ``EnvironmentFile=`` names the model and
engine arguments. A deploy writes that file for the pinned set atomically (a temporary file
in the same directory, fsync, rename: the unit never reads half a file), restarts the unit
with the plan's ``restart`` argv, then waits until ``/health`` answers 200 and
``/v1/models`` names the pinned model. Deploying the set the replica already serves (same
file, the engine healthy and naming the model) restarts nothing. ``verify`` checks health
and the model name again, that the environment file still pins this set's digest, and the
digests of the files the engine loads (``files_path``, or the set's root).

The file (systemd's ``EnvironmentFile=`` syntax, values double-quoted)::

    ROLLOUTD_ARTEFACT_SET="llama-70b-q4km"
    ROLLOUTD_ARTEFACT_DIGEST="sha256:..."
    VLLM_MODEL="/models/llama-70b-q4km/model.gguf"
    VLLM_ARGS="--max-model-len 8192 --kv-cache-dtype fp8 --enable-prefix-caching"

and the unit's ``ExecStart=/usr/bin/vllm serve ${VLLM_MODEL} $VLLM_ARGS`` (unbraced, so
systemd splits the arguments at spaces). The engine arguments are the set's
``engine_config``: ``key: value`` as ``--key value`` (underscores as dashes), ``true`` as a
bare ``--key``, ``false`` left out (the engine's default; name the engine's own negative
flag, such as ``no_enable_prefix_caching: true``, to turn a default off). ``model`` in the
config names the file under the root to load (a GGUF); else the root itself is the model.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from rolloutd.atomicfile import replace_file
from rolloutd.core.plan import Replica
from rolloutd.core.plan import SystemdExecutor as SystemdSpec
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import Clock, DeployResult, Sleep, Stopwatch, Verification, verdict
from rolloutd.deploy.verify import REQUEST_TIMEOUT, Poller, check_files, fill
from rolloutd.redact import scrub

TAIL_CHARS = 2000
# systemctl --user finds the user manager through these; nothing else is passed on.
INHERITED = (
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME",
    "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS",
)  # fmt: skip


class EnvFileError(ValueError):
    """The set's engine config cannot be written as an environment file; says why."""


def model_path(artefacts: PinnedSet) -> str:
    """What the engine loads: ``engine_config['model']`` under the root, or the root."""
    name = artefacts.engine_config.get("model")
    return str(Path(artefacts.root) / str(name)) if name else artefacts.root


def engine_args(artefacts: PinnedSet, served_model_name: str | None) -> list[str]:
    """The set's engine config as ``vllm serve`` flags (see the module docstring).

    :raises EnvFileError: a value holds whitespace, which systemd would split.
    """
    args: list[str] = []
    config = dict(artefacts.engine_config)
    config.pop("model", None)
    if served_model_name is not None:
        config["served_model_name"] = served_model_name
    for key in sorted(config):
        value = config[key]
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        else:
            text = str(value)
            if not text or any(c.isspace() for c in text):
                raise EnvFileError(f"engine argument {key} = {text!r} is empty or holds spaces")
            args += [flag, text]
    return args


def env_file_text(artefacts: PinnedSet, served_model_name: str | None) -> str:
    """The environment file that pins ``artefacts`` (systemd ``EnvironmentFile=`` syntax).

    :raises EnvFileError: see :func:`engine_args`; or the model path holds a newline.
    """
    values = {
        "ROLLOUTD_ARTEFACT_SET": artefacts.name,
        "ROLLOUTD_ARTEFACT_DIGEST": artefacts.digest,
        "VLLM_MODEL": model_path(artefacts),
        "VLLM_ARGS": " ".join(engine_args(artefacts, served_model_name)),
    }
    lines = [f"# Written by rolloutd: artefact set {artefacts.name}. Do not edit."]
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            raise EnvFileError(f"{name} would hold a line break")
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{name}="{quoted}"')
    return "\n".join(lines) + "\n"


def read_env_file(text: str) -> dict[str, str]:
    """The assignments of an environment file written by :func:`env_file_text`."""
    values = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if not sep or line.startswith("#"):
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        values[name.strip()] = value
    return values


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a reader sees the old file or the new, never a part.
    Owner-only: the manager reads it as root or the user; engine arguments may hold a key.

    :raises OSError: the directory cannot be written.
    """
    replace_file(path, text.encode(), mode=0o600)


class SystemdDeployer(Poller):
    """Redeploys vLLM replicas through their systemd units; see the module docstring."""

    kind = "systemd"

    def __init__(
        self,
        spec: SystemdSpec,
        *,
        client: httpx.Client | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        super().__init__(spec.poll_interval, client=client, clock=clock, sleep=sleep)
        self.spec = spec

    def deploy(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> DeployResult:
        default = self.spec.restart_timeout + self.spec.health_deadline
        watch = Stopwatch.of_call(timeout, default, self.clock)
        unit = fill(self.spec.unit, replica, artefacts)
        path = Path(fill(self.spec.env_file, replica, artefacts))
        detail: dict[str, Any] = {"unit": unit, "env_file": str(path)}

        def result(ok: bool, reason: str, changed: bool = True, **more: Any) -> DeployResult:
            # exit_status, timed_out and output_tail of the restart command, once it ran.
            return DeployResult.of(
                self.kind,
                replica,
                artefacts,
                ok=ok,
                reason=reason,
                duration_s=watch.elapsed,
                changed=changed,
                detail=detail,
                **more,
            )

        try:
            text = env_file_text(artefacts, self.spec.served_model_name)
        except EnvFileError as exc:
            return result(False, f"cannot write {path} for {artefacts.name}: {exc}", False)
        base = self._base(replica)
        if _read(path) == text and not self._serving(base, artefacts, watch, once=True):
            return result(True, f"already serving {artefacts.name}", changed=False)
        try:
            write_atomically(path, text)
        except OSError as exc:
            return result(False, f"cannot write {path}: {exc.strerror or exc}", False)
        argv = [part.format_map(_fields(replica, artefacts, unit)) for part in self.spec.restart]
        detail["restart"] = [scrub(part) for part in argv]
        budget = min(self.spec.restart_timeout.total_seconds(), watch.remaining)
        status, timed_out, output = _run(argv, budget)
        tail: dict[str, Any] = {
            "exit_status": status,
            "timed_out": timed_out,
            "output_tail": output,
        }
        if status is None and not timed_out:
            return result(False, f"cannot run {argv[0]}: {output}", **tail)
        if timed_out:
            return result(False, f"{' '.join(argv)} did not finish within {budget:g} s", **tail)
        if status != 0:
            said = f": {output.strip().splitlines()[0]}" if output.strip() else ""
            return result(False, f"{' '.join(argv)} exited with status {status}{said}", **tail)
        why = self._serving(base, artefacts, watch)
        if why:
            return result(False, f"{unit} restarted, but {why}", **tail)
        return result(True, f"{unit} restarted serving {artefacts.name}", **tail)

    def verify(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> Verification:
        watch = Stopwatch.of_call(timeout, self.spec.health_deadline, self.clock)
        base = self._base(replica)
        why = self._serving(base, artefacts, watch)
        if why.startswith("not healthy"):
            return verdict(replica, artefacts, watch.elapsed, False, None, why)
        if why:
            return verdict(replica, artefacts, watch.elapsed, True, False, why)
        path = Path(fill(self.spec.env_file, replica, artefacts))
        pinned = read_env_file(_read(path) or "").get("ROLLOUTD_ARTEFACT_DIGEST")
        if pinned != artefacts.digest:
            reason = f"{path} pins {pinned or 'no set'}, not {artefacts.name} ({artefacts.digest})"
            return verdict(replica, artefacts, watch.elapsed, True, False, reason)
        files = (
            fill(self.spec.files_path, replica, artefacts)
            if self.spec.files_path is not None
            else artefacts.root
        )
        matches, why, detail = check_files(artefacts, files)
        return verdict(replica, artefacts, watch.elapsed, True, matches, why, detail)

    def expected_model(self, artefacts: PinnedSet) -> str:
        """The name ``/v1/models`` must show for ``artefacts``."""
        return self.spec.served_model_name or model_path(artefacts)

    def _base(self, replica: Replica) -> str:
        return self.spec.urls.get(replica.name, replica.url)

    def _serving(
        self, base: str, artefacts: PinnedSet, watch: Stopwatch, *, once: bool = False
    ) -> str:
        """ "" when the engine is healthy and names the pinned model; else why not, polling
        until ``watch`` runs out unless ``once``. A healthy engine naming another model is
        an answer at once: the unit runs something else."""
        expected = self.expected_model(artefacts)
        while True:
            why = _health(self.client, base, watch)
            healthy = not why
            if healthy:
                names = _model_names(self.client, base, watch)
                if names is not None:
                    if expected in names:
                        return ""
                    shown = ", ".join(names) or "no model"
                    return f"{base}/v1/models names {shown}, not the pinned {expected}"
                why = f"{base}/v1/models did not list models"
            if once or watch.remaining <= 0:
                return f"not healthy: {why}" if not healthy else why
            self.sleep(min(self.interval, watch.remaining))


def _health(client: httpx.Client, base: str, watch: Stopwatch) -> str:
    """ "" when ``/health`` answers 200; else what it said."""
    url = f"{base}/health"
    try:
        response = client.get(url, timeout=_request_timeout(watch))
    except httpx.HTTPError as exc:
        return f"GET {url}: {type(exc).__name__}: {exc}"
    return "" if response.status_code == 200 else f"GET {url} answered {response.status_code}"


def _request_timeout(watch: Stopwatch) -> float:
    return max(0.5, min(REQUEST_TIMEOUT, watch.remaining))


def _model_names(client: httpx.Client, base: str, watch: Stopwatch) -> list[str] | None:
    try:
        response = client.get(f"{base}/v1/models", timeout=_request_timeout(watch))
        data = response.json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    if response.status_code != 200 or not isinstance(data, list):
        return None
    return [str(item.get("id")) for item in data if isinstance(item, dict)]


def _fields(replica: Replica, artefacts: PinnedSet, unit: str) -> dict[str, str]:
    return {
        "replica": replica.name,
        "url": replica.url,
        "set": artefacts.name,
        "digest": artefacts.digest,
        "root": artefacts.root,
        "engine": artefacts.engine,
        "manifest": "",
        "unit": unit,
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _run(argv: list[str], budget: float) -> tuple[int | None, bool, str]:
    """(exit status, timed out, output tail); the status is None when it could not start
    (the output then says why)."""
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return None, False, exc.strerror or str(exc)
    try:
        output, _ = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        return process.returncode, True, _tail(output)
    return process.returncode, False, _tail(output)


def _tail(output: bytes) -> str:
    text = output.decode("utf-8", errors="replace")
    return scrub(text[-TAIL_CHARS:])
