"""The HTTP face of a simulated replica: routes as vLLM or Triton serve them, plus admin.

Both flavors: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /metrics``.
vLLM: ``GET /health`` (200, or 503 while the engine is dead). Triton: ``GET /v2/health/
live|ready`` (ready: 200/400), the model repository API (see ``repository``).
Admin (the sim's own): ``GET|POST|DELETE /admin/faults`` (``{"oom": true}`` crashes the
engine), ``GET /admin/state``, ``POST /admin/restart {"config": {engine args}}``.
Everything is on one port (Triton puts metrics on their own, 8002). A threaded server (on
127.0.0.1 unless told otherwise) with HTTP/1.1 keep-alive: each connection has a thread, so
concurrent sessions really queue for the engine's slots.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from rolloutd.httpserve import QuietServer
from rolloutd.sim import repository
from rolloutd.sim.config import ConfigError, apply_engine_args
from rolloutd.sim.exposition import CONTENT_TYPE, EngineCollector, render
from rolloutd.sim.faults import FaultError
from rolloutd.sim.process import Reply
from rolloutd.sim.protocol import SESSION_HEADER

if TYPE_CHECKING:
    from rolloutd.sim.engine import Replica

_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/config)?$")
_REPOSITORY = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")


class EngineServer:
    """Serves one replica until ``close()``."""

    def __init__(self, replica: Replica, port: int = 0, host: str = "127.0.0.1") -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(EngineCollector(replica.metric_state))
        handler = type("Handler", (_Handler,), {"replica": replica, "registry": registry})
        self._httpd = QuietServer((host, port), handler)
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"sim-{replica.name}",
        )
        self._thread.start()

    def close(self) -> None:
        """Stop accepting requests and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the second waits for a delayed ACK.
    disable_nagle_algorithm = True
    timeout = 60
    replica: Replica
    registry: CollectorRegistry

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test run sends thousands of requests."""

    def do_GET(self) -> None:
        """Route a GET."""
        self._send(self._get(self.path.split("?", 1)[0]))

    def do_POST(self) -> None:
        """Route a POST."""
        try:
            body = self._body()
        except ValueError as exc:
            self._send(Reply(400, {"error": f"the request body is not JSON: {exc}"}))
            return
        self._send(self._post(self.path.split("?", 1)[0], body))

    def do_DELETE(self) -> None:
        """Route a DELETE."""
        if self.path == "/admin/faults":
            self.replica.clear_faults()
            self._send(Reply(200, self.replica.faults.as_dict()))
        else:
            self._send(Reply(404, {"error": "not found"}))

    def _get(self, path: str) -> Reply:
        replica, triton = self.replica, self.replica.flavor == "triton"
        if path == "/metrics":
            if replica.metric_state() is None:
                return Reply(503, {"error": "the engine process is not running"})
            if replica.faults.metrics_silent >= 1.0:
                return Reply(503, {"error": "the metrics exporter does not answer"})
            return Reply(200, render(self.registry))
        if path == "/v1/models":
            config = replica.config
            card = {
                "id": config.model,
                "object": "model",
                "owned_by": replica.flavor,
                "max_model_len": config.max_seq_len,
                # vLLM reports the path (or hub id) it loaded the model from.
                "root": config.model_path or config.model,
            }
            return Reply(200, {"object": "list", "data": [card]})
        if path == "/admin/faults":
            return Reply(200, replica.faults.as_dict())
        if path == "/admin/state":
            return Reply(200, replica.describe())
        if not triton and path == "/health":
            return Reply(200 if replica.alive else 503)
        if triton and path == "/v2/health/live":
            return Reply(200)
        if triton and path == "/v2/health/ready":
            return Reply(200 if repository.server_ready(replica) else 400)
        match = _MODEL.match(path) if triton else None
        if match is not None:
            name, version, tail = match.groups()
            if tail == "/ready":
                return repository.ready(replica, name, version)
            if tail == "/config":
                return repository.model_config(replica, name)
            return repository.metadata(replica, name)
        return Reply(404, {"error": f"no route for GET {path}"})

    def _post(self, path: str, body: Any) -> Reply:
        replica, triton = self.replica, self.replica.flavor == "triton"
        if path == "/v1/chat/completions":
            return replica.complete(body, self.headers.get(SESSION_HEADER))
        if path == "/admin/faults":
            return _set_faults(replica, body)
        if path == "/admin/restart":
            changes = body.get("config", {}) if isinstance(body, dict) else {}
            try:
                replica.restart(apply_engine_args(replica.config, changes))
            except ConfigError as exc:
                return Reply(400, {"error": str(exc)})
            return Reply(200, replica.describe())
        if triton and path == "/v2/repository/index":
            return repository.index(replica, body)
        match = _REPOSITORY.match(path) if triton else None
        if match is not None:
            name, action = match.groups()
            if action == "load":
                return repository.load(replica, name, body)
            return repository.unload(replica, name)
        return Reply(404, {"error": f"no route for POST {path}"})

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw.strip() else None

    def _send(self, reply: Reply) -> None:
        if isinstance(reply.body, bytes):
            payload, kind = reply.body, CONTENT_TYPE
        elif reply.body is None:
            payload, kind = b"", "application/json"
        else:
            payload, kind = json.dumps(reply.body).encode(), "application/json"
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


def _set_faults(replica: Replica, body: Any) -> Reply:
    if not isinstance(body, dict):
        return Reply(400, {"error": 'expected a JSON object of faults, e.g. {"latency_factor": 3}'})
    changes = dict(body)
    oom = changes.pop("oom", False)
    try:
        faults = replica.set_faults(**changes)
    except FaultError as exc:
        return Reply(400, {"error": str(exc)})
    if oom is True:
        replica.inject_oom("injected over /admin/faults")
    return Reply(200, faults.as_dict())
