"""The web view's requests: routing, the token, and nothing that writes.

Served beside ``/healthz`` on the daemon's port, by every instance (leader or standby), from
the database. Bound to a loopback address it needs no login; bound to any other, every page
needs ``ROLLOUTD_UI_TOKEN``, as ``Authorization: Bearer TOKEN`` or as the cookie that
``?token=TOKEN`` sets (then the address bar is cleaned by a redirect). Without it the
answer is a bare 401, whatever was asked; with no token configured a non-loopback view
answers 401 to everyone.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from rolloutd.errors import NotFound
from rolloutd.store.db import transaction
from rolloutd.web import pages
from rolloutd.web.data import list_version, version

if TYPE_CHECKING:
    from rolloutd.store.types import Sessions

COOKIE = "rolloutd_ui"
_ROLLOUT = re.compile(r"^/rollouts/(\d{1,18})(/version)?$")
_RUN = re.compile(r"^/runs/(\d{1,18})$")


@dataclass(frozen=True)
class Response:
    """What to send back."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebView:
    """Answers the web view's GET requests from the database."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        host: str,
        token: str | None,
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self.open = is_loopback(host)
        self.token = token or None
        self.clock = clock

    def handle(self, path: str, query: str, headers: Mapping[str, str]) -> Response:
        """The answer to ``GET path?query``; ``headers`` by lower-case name."""
        arguments = {k: v[-1] for k, v in parse_qs(query).items()}
        if not self.open:
            given = arguments.get("token")
            if given is not None and self._valid(given):
                # Keep the token out of the address bar and of the browser's history.
                return Response(
                    303,
                    headers={
                        "Location": path,
                        "Set-Cookie": f"{COOKIE}={given}; HttpOnly; SameSite=Strict; Path=/",
                    },
                )
            if not self._authorised(headers):
                return Response(
                    401, b"401 unauthorized\n", {"Content-Type": "text/plain; charset=utf-8"}
                )
        try:
            return self._route(path, arguments)
        except NotFound as exc:
            return _text(404, str(exc))

    def _route(self, path: str, arguments: dict[str, str]) -> Response:
        if path.startswith("/static/"):
            found = pages.static(path.removeprefix("/static/"))
            if found is None:
                return _text(404, "no such file")
            body, content_type = found
            cached = {"Content-Type": content_type, "Cache-Control": "max-age=300"}
            return Response(200, body, cached)
        with transaction(self.sessions) as session:
            if path == "/":
                filters = {k: arguments.get(k, "") for k in ("service", "environment", "state")}
                return _html(pages.index_page(session, filters, now=self.clock()))
            if path == "/version":
                return _json({"version": list_version(session)})
            run = _RUN.match(path)
            if run is not None:
                return _html(pages.run_html(session, int(run.group(1))))
            match = _ROLLOUT.match(path)
            if match is None:
                return _text(404, "not found; try /, /rollouts/ID or /runs/ID")
            rollout_id = int(match.group(1))
            if match.group(2):
                return _json({"version": version(session, rollout_id)})
            return _html(pages.rollout_html(session, rollout_id, now=self.clock(), report=False))

    def _authorised(self, headers: Mapping[str, str]) -> bool:
        authorization = headers.get("authorization", "")
        if authorization.startswith("Bearer ") and self._valid(authorization[7:].strip()):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header is no token
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and self._valid(morsel.value)

    def _valid(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())


def _html(text: str) -> Response:
    return Response(
        200,
        text.encode(),
        {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"},
    )


def _json(document: object) -> Response:
    return Response(
        200,
        json.dumps(document).encode(),
        {"Content-Type": "application/json", "Cache-Control": "no-store"},
    )


def _text(status: int, message: str) -> Response:
    plain = {"Content-Type": "text/plain; charset=utf-8"}
    return Response(status, (message + "\n").encode(), plain)
