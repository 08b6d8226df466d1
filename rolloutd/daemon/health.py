"""``/healthz`` on a local port: is the main loop alive, and is this instance leading?

Answers 200 with ``{"role": "leader" | "standby", ...}`` while the main loop keeps
turning, and 503 once it has not turned for a while (a hung loop must look unhealthy
to a load balancer or a probe, as it does to systemd's watchdog). The body also carries
what an operator looks at next, such as the command listener's state; only the main loop
decides the status code. ``/metrics`` on the same port serves rolloutd's own metrics to
Prometheus when the daemon supplies them, and every other path goes to the read-only web
view (:mod:`rolloutd.web.server`) when the daemon supplies one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

import structlog

from rolloutd.httpserve import QuietServer
from rolloutd.web.server import Response

log = structlog.get_logger("rolloutd.health")
Web = Callable[[str, str, Mapping[str, str]], Response]


class HealthServer:
    """A tiny HTTP server in a daemon thread; ``report()`` supplies the body."""

    def __init__(
        self,
        host: str,
        port: int,
        report: Callable[[], tuple[bool, dict[str, Any]]],
        metrics: Callable[[], tuple[Iterable[bytes], str]] | None = None,
        web: Web | None = None,
    ):
        handler = _handler(report, metrics, web)
        self._server = QuietServer((host, port), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rolloutd-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The port actually bound (useful when 0 asked for any free one)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()


def _handler(
    report: Callable[[], tuple[bool, dict[str, Any]]],
    metrics: Callable[[], tuple[Iterable[bytes], str]] | None,
    web: Web | None,
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/metrics" and metrics is not None:
                chunks, content_type = metrics()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                # No Content-Length: the families are written as they are built, and the
                # answer ends when the connection closes (HTTP/1.0, as this server speaks).
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(chunk)
                return
            if path != "/healthz":
                if web is None:
                    self._send(404, {"error": "not found; try /healthz"})
                    return
                _, _, query = self.path.partition("?")
                try:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    answer = web(path, query, headers)
                except Exception as exc:  # a page must never take the health port down
                    log.error("web view failed", path=path, error=f"{type(exc).__name__}: {exc}")
                    answer = Response(500, b"500 the page failed; see the daemon log\n")
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
                return
            healthy, body = report()
            self._send(200 if healthy else 503, body)

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the log

    return Handler
