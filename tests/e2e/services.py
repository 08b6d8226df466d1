"""Real Prometheus and HAProxy in front of a simulated fleet, on 127.0.0.1.

:class:`PrometheusService` runs Debian's ``prometheus`` against a ``prometheus.yml`` written
to a temporary directory: one static target per replica with a ``pool`` label added in the
scrape config (as a real deployment adds it), plus the agent gateway's exporter, every
second. :class:`FleetHAProxy` is the router tests' HAProxy with the fleet's replicas as the
backend's servers. Both start from a directory and stop by their own process handle.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from rolloutd.routers.haproxy import HAProxyRouter
from tests.e2e.fleet_process import ReplicaInfo
from tests.routers.services import HAProxyService, free_port

BACKEND = "llm"
SCRAPE_INTERVAL_S = 1.0


def _host_port(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


class PrometheusService:
    """A real prometheus scraping each replica (labelled with its pool) and the gateway."""

    def __init__(
        self,
        directory: Path,
        binary: str,
        *,
        replicas: list[ReplicaInfo],
        gateway_url: str,
        daemon_port: int | None = None,
    ) -> None:
        self.directory = directory
        self.binary = binary
        self.port = free_port()
        self.data = directory / "tsdb"
        self.config = directory / "prometheus.yml"
        self.log = directory / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None
        targets = [{"targets": [_host_port(r.url)], "labels": {"pool": r.pool}} for r in replicas]
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_INTERVAL_S:g}s",
                "scrape_timeout": f"{SCRAPE_INTERVAL_S:g}s",
                "evaluation_interval": "10s",
            },
            "scrape_configs": [
                # The pool comes from the target, as a deployment's scrape config sets it.
                {"job_name": "engines", "static_configs": targets},
                # The gateway labels its counters with the pool itself: no target label.
                {
                    "job_name": "agent-gateway",
                    "static_configs": [{"targets": [_host_port(gateway_url)]}],
                },
            ],
        }
        if daemon_port is not None:
            # rolloutd's own /metrics (on its health port); it starts after Prometheus.
            config["scrape_configs"].append(
                {
                    "job_name": "rolloutd",
                    "static_configs": [{"targets": [f"127.0.0.1:{daemon_port}"]}],
                }
            )
        # JSON is YAML: no quoting surprises in label values or paths.
        self.config.write_text(json.dumps(config, indent=2))
        self.expected_targets = len(targets) + 1

    @property
    def url(self) -> str:
        """The HTTP API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> PrometheusService:
        """Start prometheus (same port and data directory every time) and wait until ready."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.data}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1d",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self._wait(lambda: self._get("/-/ready") is not None, timeout, "prometheus to be ready")
        return self

    def wait_targets_up(self, timeout: float = 20.0) -> None:
        """Wait until every target has been scraped successfully."""

        def all_up() -> bool:
            answer = self._get("/api/v1/targets?state=active")
            if answer is None:
                return False
            targets = json.loads(answer)["data"]["activeTargets"]
            up = [
                t for t in targets if t["health"] == "up" and t["labels"].get("job") != "rolloutd"
            ]
            return len(up) == self.expected_targets

        self._wait(all_up, timeout, f"{self.expected_targets} prometheus targets to be up")

    def wait_scrapes(self, count: int, timeout: float = 20.0) -> None:
        """Wait until every target has been scraped ``count`` times (in the last minute)."""

        def scraped() -> bool:
            least = self.value("min(count_over_time(up[1m]))")
            return least is not None and least >= count

        self._wait(scraped, timeout, f"every target to be scraped {count} times")

    def stop(self) -> None:
        """Stop prometheus (SIGTERM, then SIGKILL after 10 s) and reap it."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def value(self, promql: str) -> float | None:
        """The value of an instant query that answers one series (None: no answer)."""
        answer = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if answer is None:
            return None
        result = json.loads(answer)["data"]["result"]
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as response:
                body: bytes = response.read()
                return body if response.status == 200 else None
        except (OSError, urllib.error.URLError):
            return None

    def _wait(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(
                    f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            if condition():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """The end of prometheus's log."""
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class FleetHAProxy(HAProxyService):
    """The router tests' HAProxy, with the fleet's replicas as the sticky backend's servers.

    Only the configuration differs from :class:`HAProxyService`; starting, the runtime-API
    probe and stopping are the same.
    """

    def __init__(self, directory: Path, replicas: list[ReplicaInfo], binary: str) -> None:
        self._prepare(directory, binary)
        self.stable = [r.name for r in replicas if r.pool == "stable"]
        self.canary = [r.name for r in replicas if r.pool == "canary"]
        servers = "\n".join(
            f"    server {r.name} {_host_port(r.url)} weight {0 if r.pool == 'canary' else 1}"
            for r in replicas
        )
        self._write_config(servers, timeout="60s")

    @property
    def url(self) -> str:
        """Where the agents send their requests."""
        return f"http://127.0.0.1:{self.port}"

    def router(self, **overrides: object) -> HAProxyRouter:
        """A driver for the fleet's backend (to read the weight back as the tests do)."""
        return HAProxyRouter(
            str(self.socket),
            backend=BACKEND,
            stable=self.stable,
            canary=self.canary,
            config_path=self.config,
            state_file=self.state_file,
        )

    def router_spec(self) -> dict[str, Any]:
        """The plan's ``router`` section for this HAProxy."""
        return {
            "driver": "haproxy",
            "socket": str(self.socket),
            "backend": BACKEND,
            "servers": {"stable": self.stable, "canary": self.canary},
            "state_file": str(self.state_file),
            "config_path": str(self.config),
            "session_header": "X-Session-Id",
        }
