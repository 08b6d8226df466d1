"""Tests of the least-privilege roles on the real Postgres: ``rolloutd db roles`` creates them
once, each role can do its job and no more, the check notices a grant out of place, and the
history names the database role beside a forged operator name."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from sqlalchemy import make_url

from rolloutd.cli.daemon import main as rolloutd_main
from rolloutd.store.db import make_engine, session_factory, upgrade
from tests.cli import Ctl
from tests.deploy.helpers import pin_and_drill
from tests.plans import example_dict, example_plan
from tests.twins import Leader

if TYPE_CHECKING:
    from conftest import PostgresServer, StoreHandle

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "plans" / "atlas-70b-maxseq8192.yaml"


@dataclass
class Roled:
    """A migrated database of its own and a prefix no other test uses."""

    url: str
    prefix: str

    def role(self, kind: str) -> str:
        return f"{self.prefix}_{kind}"

    def url_as(self, kind: str) -> str:
        """The database's URL, logging in as the role of ``kind`` (trust over the socket)."""
        return make_url(self.url).set(username=self.role(kind)).render_as_string(False)

    def admin(self, *statements: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement)


@pytest.fixture
def roled(pg_server: PostgresServer) -> Iterator[Roled]:
    """A fresh migrated database; its roles are dropped afterwards, with what they own and
    every grant they hold (roles are cluster-wide)."""
    url = pg_server.create()
    upgrade(url)
    found = Roled(url, f"rt{uuid.uuid4().hex[:8]}")
    try:
        yield found
    finally:
        kinds = ("operator", "viewer", "daemon")
        with psycopg.connect(url, autocommit=True) as connection:
            for kind in kinds:
                role = found.role(kind)
                exists = connection.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)
                ).fetchone()
                if exists:
                    connection.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER')
                    connection.execute(f'DROP OWNED BY "{role}"')
        pg_server.drop(url)
        with psycopg.connect(pg_server.url_of("postgres"), autocommit=True) as connection:
            for kind in kinds:
                connection.execute(f'DROP ROLE IF EXISTS "{found.role(kind)}"')


def _rolloutd(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        rolloutd_main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(exited.value.code or 0), out, err


def _roles(
    roled: Roled,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
) -> tuple[int, dict[str, object]]:
    code, out, _ = _rolloutd(
        roled.url,
        monkeypatch,
        capsys,
        "db",
        "roles",
        "--prefix",
        roled.prefix,
        *extra,
        "-o",
        "json",
    )
    return code, json.loads(out)


def _denied(url: str, statement: str) -> bool:
    """Whether the role in ``url`` is refused ``statement`` for want of a privilege."""
    with psycopg.connect(url) as connection:
        try:
            connection.execute(statement)
        except psycopg.errors.InsufficientPrivilege:
            return True
        finally:
            connection.rollback()
    return False


def _started(
    roled: Roled, tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> int:
    """The example plan started by the operator role, after it pinned the plan's artefact
    sets and recorded a passed staging drill (what ``rolloutctl pin`` and ``drill`` write)."""
    engine = make_engine(roled.url_as("operator"))
    try:
        with session_factory(engine).begin() as session:
            pin_and_drill(session, example_plan(), tmp / "artefacts")
    finally:
        engine.dispose()
    ctl = Ctl.on(roled.url_as("operator"), monkeypatch, capsys)
    return int(ctl.json("start", str(EXAMPLE))["id"])


@pytest.mark.postgres
def test_roles_are_created_once_and_a_second_run_changes_nothing(
    roled: Roled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first run creates the three roles and grants; the second finds all in place,
    changes nothing and succeeds; --check agrees; nothing printed names a password."""
    code, first = _roles(roled, monkeypatch, capsys, "--login")
    assert code == 0 and first["ok"] is True
    created = {c["what"].split()[0] for c in first["changed"] if c["action"] == "create role"}
    assert created == {roled.role(k) for k in ("viewer", "operator", "daemon")}
    code, second = _roles(roled, monkeypatch, capsys, "--login")
    assert code == 0 and second["changed"] == [] and second["ok"] is True
    code, checked = _roles(roled, monkeypatch, capsys, "--check")
    assert code == 0 and checked["problems"] == []
    assert "password" not in json.dumps([first, second]).lower()


@pytest.mark.postgres
def test_the_check_reports_a_missing_and_a_dangerous_extra_grant(
    roled: Roled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator given UPDATE on rollouts and a viewer that lost SELECT on events fail the
    check (exit 1), each named; the next run puts both right."""
    assert _roles(roled, monkeypatch, capsys)[0] == 0
    roled.admin(
        f"GRANT UPDATE ON rollouts TO {roled.role('operator')}",
        f"REVOKE SELECT ON events FROM {roled.role('viewer')}",
    )
    code, checked = _roles(roled, monkeypatch, capsys, "--check")
    assert code == 1 and checked["ok"] is False
    problems = {(p["role"], p["problem"], p["what"], p["dangerous"]) for p in checked["problems"]}
    assert (roled.role("operator"), "extra", "UPDATE on rollouts", True) in problems
    assert (roled.role("viewer"), "missing", "SELECT on events", False) in problems
    code, _, err = _rolloutd(
        roled.url, monkeypatch, capsys, "db", "roles", "--prefix", roled.prefix, "--check"
    )
    assert code == 1 and "extra: UPDATE on rollouts (dangerous)" in err
    code, fixed = _roles(roled, monkeypatch, capsys)
    assert code == 0 and fixed["ok"] is True
    assert {c["action"] for c in fixed["changed"]} == {"grant", "revoke"}


@pytest.mark.postgres
def test_the_check_reports_roles_that_do_not_exist(
    roled: Roled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the roles are created, --check says so for each of the three and exits 1."""
    code, checked = _roles(roled, monkeypatch, capsys, "--check")
    assert code == 1
    assert {p["problem"] for p in checked["problems"]} == {"no such role"}
    assert len(checked["problems"]) == 3


@pytest.mark.postgres
def test_a_viewer_reads_every_view_but_cannot_submit_or_change_a_row(
    roled: Roled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As the viewer, list, status and history work; abort is refused in one line (exit 3,
    no statement shown); UPDATE, INSERT and DELETE on rollouts, commands and events fail."""
    assert _roles(roled, monkeypatch, capsys, "--login")[0] == 0
    rollout_id = _started(roled, tmp_path, monkeypatch, capsys)
    viewer = Ctl.on(roled.url_as("viewer"), monkeypatch, capsys)
    assert [r["id"] for r in viewer.json("list")] == [rollout_id]
    assert viewer.json("status", str(rollout_id))["id"] == rollout_id
    assert viewer.json("history", str(rollout_id))[0]["kind"] == "created"
    code, _, err = viewer("abort", str(rollout_id), "--reason", "mine now")
    assert code == 3 and "permission denied for table" in err and "INSERT" not in err
    url = roled.url_as("viewer")
    assert _denied(url, "UPDATE rollouts SET state = 'aborted'")
    assert _denied(url, "DELETE FROM events")
    assert _denied(
        url,
        "INSERT INTO commands (rollout_id, kind, args, actor, created_at, status)"
        f" VALUES ({rollout_id}, 'abort', '{{}}', 'x', now(), 'pending')",
    )


@pytest.mark.postgres
def test_an_operator_submits_but_cannot_rewrite_rollouts_actions_leases_or_events(
    roled: Roled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As the operator, start and abort work; a forged USER=root shows in the history beside
    the real role; UPDATE on rollouts, actions or leases and DELETE on events are refused."""
    assert _roles(roled, monkeypatch, capsys, "--login")[0] == 0
    rollout_id = _started(roled, tmp_path, monkeypatch, capsys)
    monkeypatch.delenv("SUDO_USER", raising=False)
    monkeypatch.setenv("USER", "root")
    monkeypatch.setenv("LOGNAME", "root")
    operator = Ctl.on(roled.url_as("operator"), monkeypatch, capsys)
    submitted = operator.json("abort", str(rollout_id), "--reason", "tool args wrong")
    assert submitted["queued"] is True
    history = operator.json("history", str(rollout_id))
    assert history[-1]["actor"] == f"root (as db role {roled.role('operator')})"
    url = roled.url_as("operator")
    for statement in (
        "UPDATE rollouts SET state = 'completed'",
        "UPDATE actions SET status = 'done'",
        "UPDATE leases SET holder = 'me'",
        "DELETE FROM events",
        "DELETE FROM commands",
        "UPDATE commands SET status = 'applied'",
        "INSERT INTO actions (rollout_id, key, kind, payload, status, attempts, created_at)"
        f" VALUES ({rollout_id}, 'x', 'deploy', '{{}}', 'pending', 0, now())",
    ):
        assert _denied(url, statement), statement
    # What `rolloutctl eval` stores (a run, its cases, the judge's scores) is the operator's.
    with psycopg.connect(url) as connection:
        connection.execute(
            "INSERT INTO judge_scores (key, score, judged_at) VALUES ('k', 1.0, now())"
        )
        assert connection.execute("SELECT count(*) FROM judge_scores").fetchone() == (1,)


@pytest.mark.postgres
def test_the_daemon_role_applies_a_command_and_the_history_keeps_both_names(
    roled: Roled,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A leader connected as the daemon role (which owns the tables) applies an abort the
    operator submitted under a forged name; the event it writes names both, and the
    command row keeps the operator's role, not the daemon's."""
    from conftest import StoreHandle

    assert _roles(roled, monkeypatch, capsys, "--login")[0] == 0
    engine = make_engine(roled.url_as("daemon"))
    store: StoreHandle = StoreHandle(
        backend="postgres",
        url=roled.url_as("daemon"),
        engine=engine,
        sessions=session_factory(engine),
    )
    try:
        leader = Leader(store, example_dict())
        leader.tick()
        monkeypatch.delenv("SUDO_USER", raising=False)
        monkeypatch.setenv("USER", "root")
        monkeypatch.setenv("LOGNAME", "root")
        operator = Ctl.on(roled.url_as("operator"), monkeypatch, capsys)
        operator.json("abort", str(leader.rollout_id), "--reason", "OOM on canary-2")
        state = leader.tick(seconds=5)
        assert state in {"rolling_back", "rolled_back", "aborted"}
        history = operator.json("history", str(leader.rollout_id))
        shown = f"root (as db role {roled.role('operator')})"
        assert any(shown in e["detail"] and e["kind"] != "command" for e in history), history
        with psycopg.connect(roled.url) as connection:
            (role,) = connection.execute("SELECT db_role FROM commands").fetchone() or ("",)
        assert role == roled.role("operator")
    finally:
        engine.dispose()


def test_roles_on_sqlite_are_bad_input_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite has no roles: exit 2 saying roles need Postgres; no database file is made."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    code, _, err = _rolloutd(url, monkeypatch, capsys, "db", "roles")
    assert code == 2 and "roles need Postgres" in err
    assert not (tmp_path / "r.db").exists()


@pytest.mark.postgres
def test_the_web_view_serves_every_page_as_the_viewer(
    roled: Roled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The web view needs no more than SELECT: each of its pages answers 200 on a session
    logged in as the viewer role, which may write nothing."""
    from datetime import UTC, datetime

    from rolloutd.web.server import WebView

    assert _roles(roled, monkeypatch, capsys, "--login")[0] == 0
    rollout_id = _started(roled, tmp_path, monkeypatch, capsys)
    engine = make_engine(roled.url_as("viewer"))
    try:
        view = WebView(
            session_factory(engine), host="127.0.0.1", token=None, clock=lambda: datetime.now(UTC)
        )
        for path in ("/", "/version", f"/rollouts/{rollout_id}", f"/rollouts/{rollout_id}/version"):
            assert view.handle(path, "", {}).status == 200, path
    finally:
        engine.dispose()
