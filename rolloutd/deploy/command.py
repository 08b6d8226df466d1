"""The ``command`` executor: the operator's own deploy script, once per replica.

The script gets the replica and the artefact set in its argv (a template) and in
``ROLLOUTD_*`` environment variables, plus a JSON manifest of the whole set. It runs in a
session of its own with a timeout: a script that hangs is terminated with its children
(SIGTERM, then SIGKILL after a grace period) and the deploy fails with ``timed_out``. The
environment is built from scratch, so rolloutd's own secrets (the database URL) never
reach the script; its output tail is recorded with known secrets scrubbed. Scripts must be
idempotent: a deploy that resumes after a crash runs them again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx

from rolloutd.core.plan import CommandExecutor as CommandSpec
from rolloutd.core.plan import Replica
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import Clock, DeployResult, Sleep, Stopwatch, Verification, verdict
from rolloutd.deploy.verify import (
    HEALTH_PATHS,
    Poller,
    check_files,
    fill,
    flavor_of,
    reported_root,
)
from rolloutd.redact import scrub

TAIL_BYTES = 4096
MAX_ENV_VALUE = 64 * 1024
KILL_GRACE_S = 5.0
# Passed through from rolloutd's environment; everything else is left behind.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME")


class CommandDeployer(Poller):
    """Runs ``spec.argv`` per replica; see the module docstring."""

    kind = "command"

    def __init__(
        self,
        spec: CommandSpec,
        *,
        client: httpx.Client | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        kill_grace: float = KILL_GRACE_S,
    ) -> None:
        super().__init__(spec.poll_interval, client=client, clock=clock, sleep=sleep)
        self.spec = spec
        self.kill_grace = kill_grace

    def deploy(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> DeployResult:
        watch = Stopwatch.of_call(timeout, self.spec.timeout, self.clock)
        with tempfile.TemporaryDirectory(prefix="rolloutd-deploy-") as scratch:
            manifest = Path(scratch) / "manifest.json"
            manifest.write_text(json.dumps(artefacts.manifest(), indent=2))
            argv = [fill(part, replica, artefacts, str(manifest)) for part in self.spec.argv]
            env = self._environment(replica, artefacts, str(manifest))
            with (Path(scratch) / "output").open("w+b") as output:
                status, timed_out, error = self._run(argv, env, output, watch.budget)
                tail = _tail(output)
        if error:
            reason = f"cannot run {argv[0]}: {error}"
        elif timed_out:
            reason = f"{argv[0]} did not finish within {watch.budget:g} s; it was killed"
        elif status != 0:
            reason = f"{argv[0]} exited with status {status}"
        else:
            reason = f"{argv[0]} deployed {artefacts.name}"
        return DeployResult.of(
            self.kind,
            replica,
            artefacts,
            ok=status == 0 and not timed_out and not error,
            reason=reason,
            duration_s=watch.elapsed,
            exit_status=status,
            timed_out=timed_out,
            output_tail=tail,
            detail={"argv": [scrub(part) for part in argv]},
        )

    def verify(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> Verification:
        watch = Stopwatch.of_call(timeout, self.spec.health_deadline, self.clock)
        flavor = flavor_of(artefacts.engine, self.spec.health)
        healthy, why = self.poll([f"{replica.url}{HEALTH_PATHS[flavor]}"], watch)
        if not healthy:
            return verdict(replica, artefacts, watch.elapsed, False, None, f"not healthy: {why}")
        path, why = self._files_path(replica, artefacts, watch, flavor)
        if path is None:
            return verdict(
                replica, artefacts, watch.elapsed, True, False, f"cannot check digests: {why}"
            )
        matches, why, detail = check_files(artefacts, path)
        return verdict(replica, artefacts, watch.elapsed, True, matches, why, detail)

    def _files_path(
        self, replica: Replica, artefacts: PinnedSet, watch: Stopwatch, flavor: str
    ) -> tuple[str | None, str]:
        """Where this host reads the files the replica serves, or None and why not."""
        if self.spec.files_path is not None:
            return fill(self.spec.files_path, replica, artefacts), ""
        hint = "set executor.files_path to where this host can read the replica's files"
        if flavor != "vllm":
            return None, hint
        # vLLM reports the model path it was started with; if this host sees the same path
        # (a shared filesystem, or the engine on the ops host), those are the files it serves.
        root = reported_root(self.client, replica.url, watch)
        if root is None or not os.path.isabs(root):
            return None, f"the engine reports its model as {root!r}, not a path; {hint}"
        return root, ""

    def _environment(self, replica: Replica, artefacts: PinnedSet, manifest: str) -> dict[str, str]:
        env = {name: os.environ[name] for name in INHERITED if name in os.environ}
        env.update(self.spec.env)
        env.update(
            {
                "ROLLOUTD_REPLICA": replica.name,
                "ROLLOUTD_REPLICA_URL": replica.url,
                "ROLLOUTD_ARTEFACT_SET": artefacts.name,
                "ROLLOUTD_ARTEFACT_DIGEST": artefacts.digest,
                "ROLLOUTD_ARTEFACT_ROOT": artefacts.root,
                "ROLLOUTD_ENGINE": artefacts.engine,
                "ROLLOUTD_ENGINE_CONFIG": json.dumps(artefacts.engine_config, sort_keys=True),
                "ROLLOUTD_ARTEFACT_MANIFEST": manifest,
            }
        )
        files = json.dumps([f.as_dict() for f in artefacts.files])
        # Linux refuses to exec with one variable over 128 KiB; the manifest has them all.
        if len(files) <= MAX_ENV_VALUE:
            env["ROLLOUTD_ARTEFACT_FILES"] = files
        return env

    def _run(
        self, argv: list[str], env: dict[str, str], output: IO[bytes], budget: float
    ) -> tuple[int | None, bool, str]:
        """Run to completion or the budget: (exit status, timed out, error starting it)."""
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return None, False, exc.strerror or str(exc)
        try:
            return process.wait(timeout=budget), False, ""
        except subprocess.TimeoutExpired:
            return self._kill(process), True, ""

    def _kill(self, process: subprocess.Popen[bytes]) -> int | None:
        # The script's children (an rsync, a curl) share its session; end them all.
        for sig, grace in ((signal.SIGTERM, self.kill_grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                return process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
        return None


def _tail(output: IO[bytes]) -> str:
    output.seek(0, os.SEEK_END)
    size = output.tell()
    output.seek(max(0, size - TAIL_BYTES))
    text = output.read().decode("utf-8", errors="replace")
    return scrub(text if size <= TAIL_BYTES else "…" + text)
