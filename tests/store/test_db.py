"""Tests of connecting: URL handling, engine settings, and errors that never show a password."""

from __future__ import annotations

import subprocess
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError

from rolloutd.errors import BadInput, DatabaseUnavailable
from rolloutd.store import db
from rolloutd.store.db import (
    check_revision,
    describe,
    make_engine,
    normalise_url,
    session_factory,
    transaction,
    translate_connect_errors,
    upgrade,
)
from rolloutd.store.queries import append_event, list_events

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
SECRET_URL = "postgresql://u:s3cret@127.0.0.1:1/x"


@pytest.mark.parametrize(
    ("written", "drivername"),
    [
        ("postgresql://user@db.example/rolloutd", "postgresql+psycopg"),
        ("postgres://user@db.example/rolloutd", "postgresql+psycopg"),
        ("postgresql+psycopg://user@db.example/rolloutd", "postgresql+psycopg"),
        ("postgresql:///test", "postgresql+psycopg"),
        ("sqlite:///rolloutd.db", "sqlite"),
        ("sqlite:////var/lib/rolloutd/rolloutd.db", "sqlite"),
    ],
)
def test_normalise_url_picks_psycopg_and_keeps_sqlite(written: str, drivername: str) -> None:
    """Postgres URLs get the psycopg 3 driver; SQLite file URLs stay as written."""
    url = normalise_url(written)
    assert url.drivername == drivername
    assert url.database == normalise_url(written).database


@pytest.mark.parametrize(
    "written",
    [
        "mysql://root:pw@localhost/db",
        "postgresql+asyncpg://u@h/db",
        "sqlite://",
        "sqlite:///:memory:",
        "not a url",
        "",
    ],
)
def test_normalise_url_rejects_other_urls_naming_the_setting(written: str) -> None:
    """Unsupported URLs are bad input naming ROLLOUTD_DATABASE_URL, without echoing the URL."""
    with pytest.raises(BadInput) as caught:
        normalise_url(written)
    assert str(caught.value) == (
        "ROLLOUTD_DATABASE_URL: expected a postgresql:// or sqlite:/// URL"
    )


def test_describe_names_host_port_database_but_not_password() -> None:
    """describe shows driver, user, host, port and database, and drops password and query."""
    shown = describe("postgres://ops:hunter2@db.example:6432/rolloutd?password=hunter2")
    assert shown == "postgresql+psycopg://ops@db.example:6432/rolloutd"
    assert describe("postgresql:///test") == "postgresql+psycopg://[local socket]:5432/test"
    assert describe("sqlite:///var/rolloutd.db") == "sqlite:///var/rolloutd.db"


def test_make_engine_does_not_connect() -> None:
    """Building an engine for an unreachable server succeeds: connecting is deferred."""
    engine = make_engine(SECRET_URL)
    assert engine.url.drivername == "postgresql+psycopg"
    engine.dispose()


def test_unreachable_database_is_unavailable_without_the_password() -> None:
    """A refused connection becomes DatabaseUnavailable naming the host, never the password."""
    with pytest.raises(DatabaseUnavailable) as caught:
        check_revision(make_engine(SECRET_URL))
    message = str(caught.value)
    assert message.startswith("cannot reach the database at postgresql+psycopg://u@127.0.0.1:1/x: ")
    printed = "".join(traceback.format_exception(caught.value))
    assert "s3cret" not in message
    assert "s3cret" not in printed


def test_upgrade_of_unreachable_database_is_unavailable() -> None:
    """rolloutd db upgrade reports an unreachable database the same way, without the password."""
    with pytest.raises(DatabaseUnavailable) as caught:
        upgrade(SECRET_URL)
    assert "s3cret" not in "".join(traceback.format_exception(caught.value))


def test_statement_errors_are_not_reported_as_unavailable(db_url: str) -> None:
    """An error in a statement on a live connection passes through unchanged."""
    engine = make_engine(db_url)
    with (
        pytest.raises((OperationalError, ProgrammingError)),
        translate_connect_errors(db_url),
        engine.connect() as connection,
    ):
        connection.execute(text("SELECT * FROM no_such_table"))
    engine.dispose()


def test_sqlite_connections_enforce_foreign_keys_and_use_wal(tmp_path: Path) -> None:
    """Every SQLite connection has foreign keys on, WAL journalling and a 5 s busy timeout."""
    engine = make_engine(f"sqlite:///{tmp_path}/pragmas.db")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    engine.dispose()


@pytest.mark.postgres
def test_postgres_connections_name_the_application(pg_store: StoreHandle) -> None:
    """Postgres connections are labelled rolloutd in pg_stat_activity and pre-pinged."""
    engine = make_engine(pg_store.url)
    with engine.connect() as connection:
        assert connection.execute(text("SHOW application_name")).scalar() == "rolloutd"
    assert engine.pool._pre_ping
    engine.dispose()


def test_store_modules_do_not_import_alembic() -> None:
    """The CLI's start-up path (db, queries) never imports alembic."""
    code = (
        "import sys, rolloutd.store.db, rolloutd.store.queries;sys.exit('alembic' in sys.modules)"
    )
    repo = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=repo, check=False).returncode == 0


def test_transaction_commits_the_block_and_rolls_back_on_error(store: StoreHandle) -> None:
    """transaction() commits what the block wrote, and nothing when the block raises."""
    with transaction(store.sessions) as session:
        append_event(session, rollout_id=None, kind="kept", actor="a", detail="", now=T0)
    with pytest.raises(RuntimeError), transaction(store.sessions) as session:
        append_event(session, rollout_id=None, kind="lost", actor="a", detail="", now=T0)
        raise RuntimeError("boom")
    with store.sessions() as session:
        assert [e.kind for e in list_events(session, None)] == ["kept"]


def test_transaction_on_unreachable_database_is_unavailable() -> None:
    """transaction() reports an unreachable database as DatabaseUnavailable."""
    factory = session_factory(make_engine(SECRET_URL))
    with pytest.raises(DatabaseUnavailable), transaction(factory) as session:
        session.execute(text("SELECT 1"))


def test_sqlite_locked_past_the_busy_timeout_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that waits out the busy timeout gets a retryable DatabaseUnavailable."""
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 50)
    url = f"sqlite:///{tmp_path}/busy.db"
    engine = make_engine(url)
    with engine.connect() as holder:
        holder.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        holder.commit()
        holder.exec_driver_sql("INSERT INTO t VALUES (1)")
        with (
            pytest.raises(DatabaseUnavailable, match="database is locked"),
            transaction(session_factory(engine)) as session,
        ):
            session.execute(text("INSERT INTO t VALUES (2)"))
    engine.dispose()
