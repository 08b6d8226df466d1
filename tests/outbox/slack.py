"""A local HTTP server that answers as a Slack incoming webhook does.

It serves one webhook per path (``/services/T…/B…/<secret>``; any other path gets Slack's
``404 no_service``), checks the body as Slack does (JSON with ``text`` or ``blocks``, else
``400 invalid_payload``), enforces Slack's pace of one message per second per webhook with
``429`` + ``Retry-After``, and can be switched at runtime to answer with any of Slack's
errors or to hang. Times come from the test's clock, so an outage of minutes can run in
milliseconds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

from rolloutd.httpserve import QuietServer

# Mode -> (status, body) for the modes that answer at once.
ANSWERS = {
    "ok": (200, "ok"),
    "rate_limited": (429, "rate_limited"),
    "invalid_payload": (400, "invalid_payload"),
    "action_prohibited": (403, "action_prohibited"),
    "channel_not_found": (404, "channel_not_found"),
    "no_service": (404, "no_service"),
    "channel_is_archived": (410, "channel_is_archived"),
    "rollup_error": (500, "rollup_error"),
}


@dataclass(frozen=True)
class Received:
    """One request Slack received, with how it was answered."""

    at: datetime
    path: str
    body: dict[str, Any] | None
    status: int


class SlackServer:
    """Webhooks on 127.0.0.1; ``mode`` says how the next requests are answered."""

    def __init__(self, clock: Callable[[], datetime], *, retry_after: int = 3) -> None:
        self.clock = clock
        self.retry_after = retry_after
        self.mode = "ok"
        self.pace = timedelta(seconds=1)
        self.requests: list[Received] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._last: dict[str, datetime] = {}
        self._paths: set[str] = set()
        self._server = QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def webhook(self, secret: str) -> str:
        """Register a webhook and return its URL (the secret is its last path segment)."""
        path = f"/services/T0000TEST/B0000TEST/{secret}"
        self._paths.add(path)
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> SlackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def delivered(self, path_suffix: str = "") -> list[dict[str, Any]]:
        """The bodies Slack accepted (to webhooks whose path ends with ``path_suffix``)."""
        return [
            r.body
            for r in self.requests
            if r.status == 200 and r.body is not None and r.path.endswith(path_suffix)
        ]

    def answered(self, status: int) -> int:
        """How many requests got ``status``."""
        return sum(r.status == status for r in self.requests)

    def _answer(self, path: str, raw: bytes) -> tuple[int, str, dict[str, str]]:
        with self._lock:
            now = self.clock()
            if path not in self._paths:
                return 404, "no_service", {}
            if self.mode in ANSWERS and self.mode != "ok":
                status, body = ANSWERS[self.mode]
                headers = {"Retry-After": str(self.retry_after)} if status == 429 else {}
                return status, body, headers
            try:
                parsed = json.loads(raw)
            except ValueError:
                return 400, "invalid_payload", {}
            if not isinstance(parsed, dict) or not (parsed.get("text") or parsed.get("blocks")):
                return 400, "invalid_payload", {}
            last = self._last.get(path)
            if last is not None and now - last < self.pace:
                return 429, "rate_limited", {"Retry-After": str(self.retry_after)}
            self._last[path] = now
            return 200, "ok", {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if server.mode == "hang":
                    server.release.wait(timeout=30)
                    return  # the connection closes without an answer
                status, text, headers = server._answer(self.path, raw)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with server._lock:
                    server.requests.append(Received(server.clock(), self.path, body, status))
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
