"""The web view's access rule, its pages and the report: no secret shown, no way in without
the token off loopback, and the rollout's data where an operator looks for it."""

from __future__ import annotations

import errno
import json
import os
import stat
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from sqlalchemy import insert

from rolloutd.alerts.sender import with_page_link
from rolloutd.daemon.health import HealthServer
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.redact import register_secret
from rolloutd.store import queries
from rolloutd.store.models import GateEvaluation
from rolloutd.web.pages import index_page, rollout_html, rollout_json
from rolloutd.web.server import WebView, is_loopback
from tests.cli import Ctl
from tests.plans import example_dict
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

TOKEN = "ui-token-3f8a9c0d"
WEBHOOK = "https://hooks.slack.com/services/T0ROLLOUT/B0ALERTS/abcdefSECRETpath123"
PASSWORD = "pg-s3cret-Passw0rd"
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def lived(store: StoreHandle) -> Harness:
    """A rollout ticked for a while, then rolled back by an OOM."""
    h = Harness(store)
    for _ in range(20):
        h.tick(seconds=60)
    h.metrics.set("oom_events", "canary", 1)
    while h.tick(seconds=5) != "rolled_back":
        pass
    return h


@pytest.fixture
def exposed(store: StoreHandle, lived: Harness) -> Iterator[str]:
    """The web view bound to every address (not loopback), with a token."""
    view = WebView(store.sessions, host="0.0.0.0", token=TOKEN, clock=lived.clock)
    server = HealthServer("0.0.0.0", 0, lambda: (True, {"role": "leader"}), web=view.handle)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.mark.parametrize(
    "path",
    ["/", "/rollouts/1", "/rollouts/1/version", "/version", "/static/rolloutd.css", "/nowhere"],
)
def test_off_loopback_a_request_without_the_token_gets_a_bare_401(exposed: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": "rolloutd_ui=wrong"}):
        status, answer_headers, body = _get(exposed + path, headers)
        assert status == 401
        assert body == b"401 unauthorized\n"
        assert "Set-Cookie" not in answer_headers


def test_the_token_opens_the_view_as_a_bearer_or_a_cookie(exposed: str, lived: Harness) -> None:
    status, _, body = _get(
        f"{exposed}/rollouts/{lived.rollout_id}", {"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200 and b"rolled_back" in body
    status, headers, _ = _get(f"{exposed}/rollouts/{lived.rollout_id}?token={TOKEN}")
    assert status == 303 and headers["Location"] == f"/rollouts/{lived.rollout_id}"
    cookie = headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in headers["Set-Cookie"]
    status, _, body = _get(f"{exposed}/", {"Cookie": cookie})
    assert status == 200 and b"rolled_back" in body
    assert TOKEN.encode() not in body
    # Probes and Prometheus keep their paths without a token: they show no rollout data.
    assert _get(f"{exposed}/healthz")[0] == 200


def test_without_a_configured_token_an_exposed_view_lets_nobody_in(
    store: StoreHandle, lived: Harness
) -> None:
    view = WebView(store.sessions, host="10.1.2.3", token=None, clock=lived.clock)
    assert view.handle("/", "token=", {}).status == 401
    assert view.handle("/", "", {"authorization": "Bearer "}).status == 401


def test_loopback_needs_no_login() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "::", "rolloutd.internal"))


def test_no_page_or_report_shows_a_webhook_url_or_a_database_password(
    store: StoreHandle, lived: Harness
) -> None:
    """Secrets that reached an event or a gate's reason are scrubbed on every page."""
    register_secret(WEBHOOK)
    register_secret(PASSWORD)
    with store.sessions.begin() as session:
        queries.append_event(
            session,
            rollout_id=lived.rollout_id,
            kind="alert_failed",
            actor="rolloutd@test",
            detail=f"POST {WEBHOOK} answered 404: The requested URL was not found",
            data={"url": WEBHOOK},
            now=lived.clock(),
        )
        session.execute(
            insert(GateEvaluation).values(
                rollout_id=lived.rollout_id,
                step_index=1,
                gate="timeouts",
                role="step",
                verdict="inconclusive",
                value=None,
                threshold="<= 0.01",
                query=f"postgresql://rolloutd:{PASSWORD}@db.internal/rolloutd",
                reason=f"cannot connect to postgresql://rolloutd:{PASSWORD}@db.internal",
                evidence={"note": WEBHOOK},
                evaluated_at=lived.clock() + timedelta(seconds=1),
            )
        )
    view = WebView(store.sessions, host="127.0.0.1", token=None, clock=lived.clock)
    with store.sessions() as session:
        pages = [
            index_page(session, {}, now=lived.clock()),
            rollout_html(session, lived.rollout_id, now=lived.clock(), report=True),
            rollout_html(session, lived.rollout_id, now=lived.clock(), report=False),
            json.dumps(rollout_json(session, lived.rollout_id, now=lived.clock())),
        ]
    pages.append(view.handle(f"/rollouts/{lived.rollout_id}", "", {}).body.decode())
    for page in pages[1:]:
        assert "alert_failed" in page and "cannot connect to" in page  # the rows are there
    for page in pages:
        assert WEBHOOK not in page and "abcdefSECRETpath123" not in page
        assert PASSWORD not in page


def test_a_prometheus_link_leaves_credentials_out(store: StoreHandle) -> None:
    data = example_dict()
    data["metrics"]["url"] = f"https://ops:{PASSWORD}@prometheus.internal:9090"
    with store.sessions.begin() as session:
        rollout_id = start_rollout(
            session, parse_plan(yaml.safe_dump(data), "p.yaml"), actor="alice", now=NOW
        )
        session.execute(
            insert(GateEvaluation).values(
                rollout_id=rollout_id,
                step_index=0,
                gate=next(iter(data["gates"])),
                role="step",
                verdict="pass",
                value=0.001,
                threshold="<= 0.01",
                query='sum(rate(agent_errors_total{pool="canary"}[5m]))',
                reason="",
                evidence={},
                evaluated_at=NOW,
            )
        )
    with store.sessions() as session:
        page = rollout_html(session, rollout_id, now=NOW, report=False)
    assert 'href="https://prometheus.internal:9090/graph?g0.expr=sum%28rate' in page
    assert PASSWORD not in page and "ops:" not in page


def test_the_report_command_writes_one_file_and_prints_json(
    bare_ctl: Ctl, lived: Harness, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "rollout.html"
    code, out, err = bare_ctl("report", str(lived.rollout_id), "--html", str(target))
    assert code == 0, err
    assert str(target) in out
    html = target.read_text(encoding="utf-8")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # as any new file, not 0600
    assert "<script" not in html and '<link rel="stylesheet"' not in html  # self-contained
    assert html.count('class="point ') >= 20
    document = bare_ctl.json("report", str(lived.rollout_id))
    assert document["status"]["state"] == "rolled_back"
    assert any(p["decided_rollback"] for g in document["gates"] for p in g["points"])
    code, _, err = bare_ctl("report", "424242")
    assert code == 2 and "no rollout 424242" in err
    code, _, err = bare_ctl("report", str(lived.rollout_id), "--html", str(tmp_path / "no" / "x"))
    assert code == 2 and "cannot write the report" in err
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # as /dev/null would be: never replaced by a file
    code, _, err = bare_ctl("report", str(lived.rollout_id), "--html", str(fifo))
    assert code == 2 and "is not a regular file" in err
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".pipe")] == []

    def full_disk(source: str, target: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full_disk)
    reports = tmp_path / "reports"
    reports.mkdir()
    code, _, err = bare_ctl("report", str(lived.rollout_id), "--html", str(reports / "late"))
    assert code == 2 and "No space left on device" in err
    assert list(reports.iterdir()) == []  # the temporary file went too


def test_a_slack_message_links_to_the_rollouts_page_when_the_view_has_an_address() -> None:
    message = {"text": "rolled back", "blocks": [{"type": "header"}]}
    linked = with_page_link(message, 7, "https://rolloutd.example/")
    assert (
        linked["blocks"][-1]["text"]["text"]
        == "<https://rolloutd.example/rollouts/7|Open the rollout's page>"
    )
    assert with_page_link(message, 7, None) == message
    assert with_page_link(message, None, "https://rolloutd.example") == message


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_no_request_method_but_get_is_answered_so_nothing_can_write(
    exposed: str, store: StoreHandle, lived: Harness, method: str
) -> None:
    """With the token, a POST, PUT, PATCH or DELETE to any page is not implemented (501) and
    the rollout's audit log is what it was: the view has no route that writes."""
    with store.sessions() as session:
        before = len(queries.list_events(session, lived.rollout_id))
    request = urllib.request.Request(
        f"{exposed}/rollouts/{lived.rollout_id}",
        data=b"state=aborted",
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with pytest.raises(urllib.error.HTTPError) as answered:
        urllib.request.urlopen(request, timeout=10)
    assert answered.value.code == 501
    with store.sessions() as session:
        assert len(queries.list_events(session, lived.rollout_id)) == before


def test_the_token_is_compared_in_constant_time(
    store: StoreHandle, lived: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every token the view is given, as a bearer, a cookie or in the query, is checked with
    hmac.compare_digest, never with ==."""
    import hmac

    from rolloutd.web import server

    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(given: bytes, expected: bytes) -> bool:
        compared.append(given)
        return real(given, expected)

    monkeypatch.setattr(server.hmac, "compare_digest", spy)
    view = WebView(store.sessions, host="10.1.2.3", token=TOKEN, clock=lived.clock)
    assert view.handle("/", "", {"authorization": f"Bearer {TOKEN}"}).status == 200
    assert view.handle("/", "", {"cookie": "rolloutd_ui=nope"}).status == 401
    assert view.handle("/", f"token={TOKEN}", {}).status == 303
    assert compared == [TOKEN.encode(), b"nope", TOKEN.encode()]


def test_a_failing_page_logs_neither_the_token_nor_the_query(exposed: str) -> None:
    """Requests are not logged; a page that fails is logged by its path alone, so a token
    given in the query string (or any other argument) never reaches the log."""
    from structlog.testing import capture_logs

    def failing(path: str, query: str, headers: dict[str, str]) -> Any:
        raise RuntimeError("the page broke")

    server = HealthServer("127.0.0.1", 0, lambda: (True, {}), web=failing)
    server.start()
    try:
        with capture_logs() as logs:
            status, _, _ = _get(
                f"http://127.0.0.1:{server.port}/rollouts/1?token={TOKEN}&service=x",
                {"Authorization": f"Bearer {TOKEN}"},
            )
    finally:
        server.stop()
    assert status == 500
    assert [entry["event"] for entry in logs] == ["web view failed"]
    assert TOKEN not in json.dumps(logs, default=str) and "service=x" not in json.dumps(logs)
