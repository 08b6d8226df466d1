"""A real LiteLLM proxy on 127.0.0.1 for the router tests: two simulated vLLM replicas
(stable and canary) behind one model group, rolloutd's plugin loaded from
``config/litellm/rolloutd_split.py``, a master key, and no proxy database.

The proxy is LiteLLM's own command (``litellm --config``) from its PyPI package, installed
in a virtualenv of its own; the plugin is imported from this checkout (``PYTHONPATH``).
Which pool answered a request is the ``x-litellm-model-id`` header of the proxy's answer:
the deployment LiteLLM chose.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from rolloutd.routers.litellm_proxy import LiteLLMRouter
from rolloutd.sim.engine import Replica
from tests.required import missing
from tests.routers.services import HEADER, free_port

ROOT = Path(__file__).parents[2]
GROUP = "atlas-70b"
MASTER_KEY = "sk-rolloutd-test-7f3a9c2e51d84b06"
DEPLOYMENTS = {"atlas-stable-1": "stable", "atlas-canary-1": "canary"}
STARTUP_TIMEOUT = 120.0


VERSION = "1.106.12"
# Where .ci/run installs the proxy: a virtualenv of its own (its pins clash with dev tools).
VENV = Path(
    os.environ.get("ROLLOUTD_LITELLM_VENV", Path.home() / f".cache/rolloutd/litellm-{VERSION}")
)


def litellm_binary() -> str:
    """The proxy's command: in ``$ROLLOUTD_LITELLM_VENV`` (as .ci/run installs it), else on
    PATH; missing fails the test (see ``tests.required``)."""
    candidate = VENV / "bin" / "litellm"
    path = str(candidate) if os.access(candidate, os.X_OK) else shutil.which("litellm")
    if path is None:
        missing(
            "the LiteLLM proxy is not installed",
            f"install litellm[proxy]=={VERSION} into {VENV} (bash .ci/run does)",
        )
    return path


class LiteLLMService:
    """The proxy, its two replicas, its weights directory and its log."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.weights_dir = directory / "weights"
        self.weights_dir.mkdir(exist_ok=True)
        self.weights_path = self.weights_dir / f"{GROUP}.json"
        self.config = directory / "litellm.yaml"
        self.log = directory / "litellm.log"
        self.port = free_port()
        self.replicas = {
            pool: Replica(f"sim-{pool}", pool=pool, flavor="vllm", time_scale=0.0001).start()
            for pool in ("stable", "canary")
        }
        self.process: subprocess.Popen[bytes] | None = None
        shutil.copy(ROOT / "config" / "litellm" / "rolloutd_split.py", directory)
        deployments = "\n".join(
            f"""  - model_name: {GROUP}
    litellm_params:
      model: openai/{GROUP}
      api_base: {self.replicas[pool].url}/v1
      api_key: none
    model_info: {{id: {ident}, rolloutd_pool: {pool}}}"""
            for ident, pool in DEPLOYMENTS.items()
        )
        self.config.write_text(
            f"""model_list:
{deployments}
litellm_settings:
  callbacks: ["prometheus", "rolloutd_split.session_split"]
  require_auth_for_metrics_endpoint: false
router_settings:
  num_retries: 0
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""
        )

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def state_url(self) -> str:
        """The plugin's read-back."""
        return f"{self.url}/rolloutd/weights"

    def start(self) -> None:
        """Start the proxy and wait until the plugin answers."""
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "ROLLOUTD_LITELLM_WEIGHTS_DIR": str(self.weights_dir),
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "INFO",
        }
        command = [litellm_binary(), "--config", str(self.config), "--host", "127.0.0.1"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, "--port", str(self.port), "--num_workers", "1"],
                stdout=log,
                stderr=log,
                env=env,
                cwd=self.directory,
                start_new_session=True,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise AssertionError(f"the LiteLLM proxy exited at start:\n{tail}")
            try:
                if self._get_state().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"the LiteLLM proxy did not answer within {STARTUP_TIMEOUT}s")

    def _get_state(self) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        conn.request("GET", "/rolloutd/weights", headers={"Authorization": f"Bearer {MASTER_KEY}"})
        answer = conn.getresponse()
        answer.read()
        conn.close()
        return answer

    def stop(self) -> None:
        """Stop the proxy (its whole process group) and wait for it."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            self.process = None

    def close(self) -> None:
        """Stop the proxy and both replicas."""
        self.stop()
        for replica in self.replicas.values():
            replica.stop()

    def router(self, **overrides: object) -> LiteLLMRouter:
        """A driver for the group (keyword arguments override)."""
        arguments: dict[str, object] = {
            "model_group": GROUP,
            "state_url": self.state_url,
            "session_header": HEADER,
            "master_key": MASTER_KEY,
        }
        arguments.update(overrides)
        path = arguments.pop("weights_path", self.weights_path)
        return LiteLLMRouter(path, **arguments)  # type: ignore[arg-type]

    def route(self, sessions: Sequence[str | None], *, connections: int = 4) -> list[str]:
        """Send one chat request per entry through the proxy; the pool that answered each
        (``None``: no session header)."""
        answers: list[str] = [""] * len(sessions)
        body = json.dumps(
            {
                "model": GROUP,
                "messages": [{"role": "user", "content": "next turn"}],
                "max_tokens": 8,
            }
        ).encode()

        def worker(indexes: Iterable[int]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            for i in indexes:
                session = sessions[i]
                headers = {
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {MASTER_KEY}",
                    **({HEADER: session} if session else {}),
                }
                conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
                answer = conn.getresponse()
                answer.read()
                ident = answer.getheader("x-litellm-model-id", "")
                answers[i] = (
                    DEPLOYMENTS.get(ident, f"? {ident}")
                    if answer.status == 200
                    else f"HTTP {answer.status}"
                )
            conn.close()

        threads = [
            threading.Thread(target=worker, args=(range(k, len(sessions), connections),))
            for k in range(connections)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return answers

    def served(self, pool: str) -> int:
        """How many chat requests the ``pool`` replica has answered (mirrored copies too)."""
        ledger = self.replicas[pool].ledger
        return sum(1 for r in ledger.between(0, ledger.position()) if r.outcome == "ok")
