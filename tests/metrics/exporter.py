"""A tiny HTTP exporter for the tests that run a real Prometheus: each path's body comes
from a function of the path and how many times it was scraped, so counters can grow by
exact steps per scrape; a path the function answers None for gets a 503, as a dead or hung
exporter gives Prometheus."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from rolloutd.httpserve import QuietServer

Render = Callable[[str, int], str | None]


class TextExporter:
    """Serves ``render(path, n)`` as the text exposition format on 127.0.0.1."""

    def __init__(self, render: Render) -> None:
        self.scrapes: dict[str, int] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.strip("/")
                n = exporter.scrapes[path] = exporter.scrapes.get(path, 0) + 1
                text = render(path, n)
                if text is None:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.host}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
