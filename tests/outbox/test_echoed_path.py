"""A webhook server that repeats the request path (a stock 404 page, an error naming the
token, a redirect) must not carry the secret in the URL's path into any log, event, outbox
row or ``rolloutctl history``; what is kept of an answer is short and printable."""

from __future__ import annotations

import json
import threading
import unicodedata
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import httpx
import pytest
from structlog.testing import capture_logs

from rolloutd.alerts.answers import EXCERPT_LIMIT, excerpt
from rolloutd.httpserve import QuietServer
from rolloutd.store.outbox import enqueue_message
from tests.outbox.harness import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

    from tests.cli import Ctl

TOKEN = "qK7vZ2mX9pL4wR8tYb3nHs6D"
PATH = f"/services/T0EXAMPLE1/B0EXAMPLE2/{TOKEN}"
# Every run of eight characters of the path; a longer fragment contains one of them.
FRAGMENTS = {PATH.lower()[i : i + 8] for i in range(len(PATH) - 7)}

# What the webhook answers, as raw HTTP, given the request path it received.
Answer = Callable[[str], bytes]


def http(status_line: str, body: str | bytes, **headers: str) -> bytes:
    """A complete HTTP/1.1 response."""
    data = body.encode() if isinstance(body, str) else body
    lines = [status_line, f"Content-Length: {len(data)}", "Connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + data


def apache_404(path: str) -> bytes:
    return http(
        "HTTP/1.1 404 Not Found",
        f"<h1>Not Found</h1>\n<p>The requested URL {path} was not found on this server.</p>\n",
        Content_Type="text/html; charset=iso-8859-1",
    )


def token_500(path: str) -> bytes:
    return http("HTTP/1.1 500 Internal Server Error", f"bad token {path.rsplit('/', 1)[-1]}")


def json_403(path: str) -> bytes:
    # Lower-cased, with the slashes escaped as PHP's json_encode does.
    url = f"https://hooks.example.com{path}".lower()
    body = json.dumps({"error": "invalid_token", "url": url}).replace("/", "\\/")
    return http("HTTP/1.1 403 Forbidden", body, Content_Type="application/json")


def redirect_301(path: str) -> bytes:
    location = f"https://hooks.example.com{path}"
    return http(
        "HTTP/1.1 301 Moved Permanently",
        f'<a href="{location}">Moved Permanently</a>.',
        Location=location,
    )


def encoded_404(path: str) -> bytes:
    return http("HTTP/1.1 404 Not Found", f"no route for {quote(path.lower(), safe='')}")


def path_in_status_line(path: str) -> bytes:
    # Not HTTP: the client's exception quotes the line it could not parse.
    return f"HTTP/1.1 {path} Not Found\r\nContent-Length: 0\r\n\r\n".encode()


class EchoingWebhook:
    """A webhook on 127.0.0.1 that answers every POST with ``answer(request path)``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.paths: list[str] = []
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                webhook.paths.append(self.path)
                self.wfile.write(webhook.answer(self.path))
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"

    def __enter__(self) -> EchoingWebhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def harness(store: StoreHandle, url: str, client: httpx.Client | None = None) -> Harness:
    """A rollout whose ops channel posts to ``url``, with one alert waiting for it."""
    h = Harness(
        store, {"SLACK_WEBHOOK_OPS": url, "SLACK_WEBHOOK_ONCALL": url}, timeout=1.0, client=client
    )
    with store.sessions.begin() as session:
        enqueue_message(
            session,
            key="test/echo",
            rollout_id=h.rollout_id,
            topic="rollback_started",
            severity="critical",
            channel="ops",
            webhook_env="SLACK_WEBHOOK_OPS",
            message={"text": "rolling back", "blocks": []},
            now=h.clock(),
        )
    return h


def leaks(text: str) -> list[str]:
    """The fragments of the path in ``text``, in any case, percent- or JSON-escaped."""
    forms = {text.lower(), unquote(text).lower(), text.replace("\\/", "/").lower()}
    return sorted(f for f in FRAGMENTS if any(f in form for form in forms))


def everywhere(h: Harness, ctl: Ctl, logs: list[dict[str, Any]]) -> dict[str, str]:
    """Every place an attempt leaves words: logs, events, the outbox row, history."""
    _, history_text, _ = ctl("history", str(h.rollout_id))
    return {
        "logs": repr(logs),
        "events": repr(h.events()),
        "last_error": str(h.outbox()[0]["last_error"]),
        "history json": json.dumps(ctl.json("history", str(h.rollout_id))),
        "history text": history_text,
    }


@pytest.mark.parametrize(
    ("answer", "recorded"),
    [
        (apache_404, "404 "),
        (token_500, "500 "),
        (json_403, "403 "),
        (redirect_301, "301 "),
        (encoded_404, "404 "),
        (path_in_status_line, "RemoteProtocolError"),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_an_answer_repeating_the_webhook_path_leaves_no_fragment_of_it_anywhere(
    store: StoreHandle, bare_ctl: Ctl, answer: Answer, recorded: str
) -> None:
    """Whatever the server echoes of the path, no eight characters of it are kept."""
    with EchoingWebhook(answer) as webhook, capture_logs() as logs:
        h = harness(store, webhook.url)
        h.send(runs=3, every=1.0)
    assert webhook.paths and webhook.paths[0] == PATH
    places = everywhere(h, bare_ctl, logs)
    assert places["last_error"].startswith(recorded)
    assert {place: leaks(text) for place, text in places.items() if leaks(text)} == {}


def test_an_exception_quoting_the_request_url_leaves_no_fragment_of_the_path(
    store: StoreHandle, bare_ctl: Ctl
) -> None:
    """A transport error that names the request URL, lower-cased or encoded, is scrubbed."""

    def refuse(request: httpx.Request) -> httpx.Response:
        said = f"{str(request.url).lower()} ({quote(request.url.path, safe='')})"
        raise httpx.ConnectError(f"cannot reach {said}", request=request)

    with capture_logs() as logs:
        h = harness(
            store,
            "https://hooks.example.com" + PATH,
            httpx.Client(transport=httpx.MockTransport(refuse)),
        )
        h.send(runs=3, every=1.0)
    places = everywhere(h, bare_ctl, logs)
    assert places["last_error"].startswith("ConnectError: cannot reach https://hooks.example.com")
    assert {place: leaks(text) for place, text in places.items() if leaks(text)} == {}


def test_a_long_binary_answer_is_kept_short_printable_and_valid_text(
    store: StoreHandle, bare_ctl: Ctl
) -> None:
    """Control characters, line breaks and bytes that are not UTF-8 do not reach the row,
    the event or history, and a large body is cut to a short excerpt."""
    body = b"bad\r\n\x1b[2Jpayload\x00 \xff\xfe \xe2\x80\xae" + b"x" * 200_000

    with EchoingWebhook(lambda path: http("HTTP/1.1 400 Bad Request", body)) as webhook:
        h = harness(store, webhook.url)
        h.send()
    error = str(h.outbox()[0]["last_error"])
    detail = next(e["detail"] for e in h.events() if e["kind"] == "alert_undeliverable")
    history = bare_ctl.json("history", str(h.rollout_id))
    shown = next(e["detail"] for e in history if e["kind"] == "alert_undeliverable")
    assert error.startswith("400 bad")
    assert "payload" in error and "\ufffd" in error
    assert len(error) <= len("400 ") + EXCERPT_LIMIT
    for text in (error, detail, shown):
        unprintable = [c for c in text if unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}]
        assert unprintable == []


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        pytest.param(
            "bad token qK7vZ2\u200bmX9pL4\u2060wR8tYb3\u202enHs6D", "bad token ***", id="split"
        ),
        pytest.param(b"no\r\n\tservice\x00 \xff", "no service \ufffd", id="bytes"),
        pytest.param("word " * 100, ("word " * 24)[:119] + "…", id="long"),
    ],
)
def test_an_excerpt_is_one_short_line_without_the_path(said: str | bytes, kept: str) -> None:
    """Invisible characters that split the token do not save it from being hidden; line
    breaks and control characters become spaces; a long answer is cut with an ellipsis."""
    assert excerpt(said, "https://hooks.example.com" + PATH) == kept
