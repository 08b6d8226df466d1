"""A minimal session-hash splitter: the load balancer of the demo, fed by the ``file`` driver.

It does what the HAProxy and NGINX configurations do in production: a session's id is
hashed to a bucket in [0, 10000); buckets below ``canary_weight * 100`` go to the canary.
The bucket of a session never changes, so raising the weight moves only stable sessions
to the canary, never the reverse, and a 15-turn conversation stays on one pool. With
``mirror`` on (the shadow step), a copy of each request also goes to the canary and its
answer is thrown away.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rolloutd.httpserve import QuietServer

BUCKETS = 10_000

# Called with (request body, response status, response body) of each mirrored request.
ShadowHook = Callable[[bytes, int, bytes], None]


def bucket_of(session_id: str) -> int:
    """The session's fixed bucket in [0, 10000)."""
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big") % BUCKETS


def pool_for(session_id: str, canary_weight: int) -> str:
    """``canary`` for sessions whose bucket falls under the weight, else ``stable``."""
    return "canary" if bucket_of(session_id) < canary_weight * (BUCKETS // 100) else "stable"


class WeightsFile:
    """The ``file`` router's JSON, re-read when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._weights: tuple[int, bool] = (0, False)
        self._lock = threading.Lock()

    def read(self) -> tuple[int, bool]:
        """(canary weight, mirror); (0, False) before rolloutd wrote anything."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return (0, False)
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    document = json.loads(self.path.read_text())
                    self._weights = (int(document["canary_weight"]), bool(document["mirror"]))
                    self._stamp = stamp
                except (OSError, ValueError, KeyError, TypeError):
                    pass  # a file being replaced: keep the last good weights
            return self._weights


class Splitter:
    """An HTTP proxy in a thread that splits sessions between two pools of replicas."""

    def __init__(
        self,
        weights: Path,
        pools: Mapping[str, Sequence[str]],
        *,
        header: str = "X-Session-Id",
        host: str = "127.0.0.1",
        port: int = 0,
        on_shadow: ShadowHook | None = None,
    ) -> None:
        self.on_shadow = on_shadow
        self.weights = WeightsFile(weights)
        self.pools = {name: list(urls) for name, urls in pools.items()}
        self.header = header
        self._server = QuietServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Where clients send their requests."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Splitter:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def route(self, session_id: str) -> tuple[str, str, bool]:
        """(pool, replica URL, mirror) for a request of ``session_id``."""
        weight, mirror = self.weights.read()
        pool = pool_for(session_id, weight)
        replicas = self.pools[pool]
        return pool, replicas[bucket_of(session_id) % len(replicas)], mirror


def _forward(
    url: str, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    target = urlsplit(url)
    connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _handler(splitter: Splitter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self._proxy("POST")

        def do_GET(self) -> None:
            self._proxy("GET")

        def _proxy(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            # A request without the header hashes as a fresh session (like NGINX's $request_id).
            session_id = self.headers.get(splitter.header) or uuid.uuid4().hex
            pool, replica, mirror = splitter.route(session_id)
            headers = {
                "Content-Type": self.headers.get("Content-Type", "application/json"),
                splitter.header: session_id,
            }
            if mirror and pool == "stable" and splitter.pools.get("canary"):
                shadow = splitter.pools["canary"][0]
                threading.Thread(
                    target=_shadow,
                    args=(splitter.on_shadow, shadow, method, self.path, body, headers),
                    daemon=True,
                ).start()
            try:
                status, data = _forward(replica, method, self.path, body, headers)
            except (OSError, http.client.HTTPException) as exc:  # a replica gone mid-answer
                status, data = 502, json.dumps({"error": f"upstream {pool}: {exc}"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Rolloutd-Pool", pool)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def _shadow(
    hook: ShadowHook | None,
    url: str,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    # A shadow answer never reaches the user; it is only scored, when someone listens.
    with contextlib.suppress(OSError):
        status, data = _forward(url, method, path, body, headers)
        if hook is not None:
            hook(body, status, data)
