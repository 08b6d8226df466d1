"""A keep-alive HTTP client on the standard library, one per traffic worker.

The traffic generator sends hundreds of requests a wall second from one Python process that
also serves the fleet; the stdlib client costs about a tenth of the CPU per request of a
full-featured one, and that is what keeps simulated time honest at small time scales.
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit


class KeepAliveClient:
    """One keep-alive HTTP connection, for one thread at a time."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._connection: http.client.HTTPConnection | None = None

    def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """POST JSON; returns status, lower-cased headers and body.

        :raises TimeoutError: no answer within the timeout.
        :raises OSError: the connection failed.
        """
        reused = self._connection is not None
        try:
            response, content = self._exchange(path, body, headers)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
            # The server closed an idle keep-alive connection: retry once on a new one.
            response, content = self._exchange(path, body, headers)
        found = {name.lower(): value for name, value in response.getheaders()}
        if found.get("connection", "").lower() == "close":
            self.close()
        return response.status, found, content

    def _exchange(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[http.client.HTTPResponse, bytes]:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = kind(self._host, self._port, timeout=self._timeout)
        try:
            self._connection.request(
                "POST", self._prefix + path, body, {"Content-Type": "application/json", **headers}
            )
            response = self._connection.getresponse()
            return response, response.read()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Drop the connection; the next request opens a new one."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
