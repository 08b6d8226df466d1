"""Database fixtures: every store test runs on SQLite and on the real local Postgres.

Fixtures
--------
``db_backend``  "sqlite" or "postgres"; parametrises every test that uses the fixtures below.
``db_url``      URL (as an operator writes it) of a fresh, *empty* database of that backend.
``store``       an empty database already at the newest schema: ``.url``, ``.engine``,
                ``.sessions`` (a sessionmaker), ``.backend``.
``session``     one session of ``store``; whatever it did not commit is rolled back afterwards.
``pg_store``    like ``store`` but always Postgres, for Postgres-only behaviour (mark the test
                ``@pytest.mark.postgres``).
``bare_ctl``    rolloutctl, run in-process, on ``store`` with nothing in it.

Environment
-----------
``ROLLOUTD_TEST_DB``  sqlite | postgres | all (default): which backends to run on.
``ROLLOUTD_TEST_PG``  the Postgres server to create test databases on (default
                      ``postgresql:///test``, the local socket).
``CI``                when set, a Postgres test that skipped anyway turns the run red.

Each test starts from an empty schema. On SQLite ``store`` is a copy of a file migrated once per
session; on Postgres, where ``CREATE DATABASE`` is slow, it is one database per session (per
xdist worker) with every table truncated before the test. A test that changes the schema itself
(downgrades, drops an index) must not use ``store``: take ``db_url`` and ``upgrade`` it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, Engine
from sqlalchemy.orm import Session, sessionmaker

from rolloutd.store.db import describe, make_engine, normalise_url, session_factory, upgrade
from rolloutd.store.models import Base
from tests.cli import Ctl
from tests.required import missing

BACKENDS = ("sqlite", "postgres")
DEFAULT_TEST_PG = "postgresql:///test"


def _selected_backends() -> tuple[str, ...]:
    choice = os.environ.get("ROLLOUTD_TEST_DB", "all").strip().lower() or "all"
    if choice == "all":
        return BACKENDS
    if choice in BACKENDS:
        return (choice,)
    raise pytest.UsageError(f"ROLLOUTD_TEST_DB must be sqlite, postgres or all, not {choice!r}")


def pytest_configure(config: pytest.Config) -> None:
    _selected_backends()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Postgres-only tests carry the mark without being parametrised; a SQLite-only run drops them.
    if "postgres" in _selected_backends():
        return
    kept = [item for item in items if item.get_closest_marker("postgres") is None]
    dropped = [item for item in items if item.get_closest_marker("postgres") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@dataclass(frozen=True)
class StoreHandle:
    """A migrated test database and the ways to talk to it."""

    backend: str
    url: str
    engine: Engine
    sessions: sessionmaker[Session]


class PostgresServer:
    """Creates and drops uniquely named databases on the test server.

    ``CREATE DATABASE`` costs a few hundred milliseconds (it syncs to disk), so migrated
    databases are shared: one per test session, emptied before each test that uses it.
    """

    def __init__(self, base: URL) -> None:
        self.base = base
        self._shared: str | None = None

    def url_of(self, database: str) -> str:
        url = self.base.set(drivername="postgresql", database=database)
        return url.render_as_string(hide_password=False)

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url_of(self.base.database or "postgres"), autocommit=True)

    def create(self) -> str:
        """Create an empty database and return its URL."""
        name = f"rolloutd_t_{uuid.uuid4().hex[:12]}"
        with self._admin() as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return self.url_of(name)

    def drop(self, url: str) -> None:
        """Drop a database made by :meth:`create`, ending any connection still open to it."""
        name = normalise_url(url).database
        with self._admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def emptied_migrated(self) -> str:
        """Return the session's migrated database with every rolloutd table emptied."""
        if self._shared is None:
            self._shared = self.create()
            upgrade(self._shared)
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        with psycopg.connect(self._shared, autocommit=True) as connection:
            connection.execute("SET lock_timeout = '5s'")
            connection.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        return self._shared

    def close(self) -> None:
        if self._shared is not None:
            self.drop(self._shared)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """The Postgres server named by ``ROLLOUTD_TEST_PG``; the tests fail if it is down."""
    base = normalise_url(os.environ.get("ROLLOUTD_TEST_PG") or DEFAULT_TEST_PG)
    server = PostgresServer(base)
    try:
        server._admin().close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = (
            f"Postgres at {describe(base)} is not reachable ({reason}). Start it"
            " (pg_ctlcluster --skip-systemctl-redirect 15 main start) or point ROLLOUTD_TEST_PG"
            " at a server where this user may CREATE DATABASE."
        )
        missing("Postgres is missing", message)
    yield server
    server.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite file migrated once per session, copied for each test."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(
    params=[
        pytest.param(
            backend, id=backend, marks=[pytest.mark.postgres] if backend == "postgres" else []
        )
        for backend in _selected_backends()
    ]
)
def db_backend(request: pytest.FixtureRequest) -> str:
    """Which database the test runs on."""
    backend: str = request.param
    return backend


def _fresh_database(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path, *, migrated: bool
) -> str:
    if backend == "sqlite":
        path = tmp_path / ("rolloutd.db" if migrated else "empty.db")
        if migrated:
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    if migrated:
        return server.emptied_migrated()
    url = server.create()
    request.addfinalizer(lambda: server.drop(url))
    return url


@pytest.fixture
def db_url(request: pytest.FixtureRequest, db_backend: str, tmp_path: Path) -> str:
    """The URL of a fresh, empty database (no schema)."""
    return _fresh_database(request, db_backend, tmp_path, migrated=False)


def _store(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[StoreHandle]:
    url = _fresh_database(request, backend, tmp_path, migrated=True)
    engine = make_engine(url)
    yield StoreHandle(backend=backend, url=url, engine=engine, sessions=session_factory(engine))
    engine.dispose()


@pytest.fixture
def store(request: pytest.FixtureRequest, db_backend: str, tmp_path: Path) -> Iterator[StoreHandle]:
    """A fresh database at the newest schema, on each selected backend."""
    yield from _store(request, db_backend, tmp_path)


@pytest.fixture
def pg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreHandle]:
    """A fresh Postgres database at the newest schema."""
    yield from _store(request, "postgres", tmp_path)


@pytest.fixture
def session(store: StoreHandle) -> Iterator[Session]:
    """A session on ``store``; uncommitted work is rolled back at the end of the test."""
    with store.sessions() as session:
        yield session


@pytest.fixture
def bare_ctl(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Ctl:
    """rolloutctl pointed at a fresh, migrated database with nothing in it."""
    return Ctl.on(store.url, monkeypatch, capsys)


@pytest.fixture
def plan_rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ids of the rollouts whose plan model a view rebuilt from the stored text, in order
    (the views' cache of outlines derived from plans starts empty)."""
    from rolloutd import operations, views

    rebuilt: list[int] = []
    shown_plan = operations.shown_plan

    def counted(rollout: Any) -> Any:
        rebuilt.append(rollout.id)
        return shown_plan(rollout)

    monkeypatch.setattr(operations, "shown_plan", counted)
    monkeypatch.setattr(views, "_derived", {})
    return rebuilt


# Under CI a Postgres test that did not run is a failure: a missing service must never
# turn into a green run. Skips are counted here and turn the session's exit status red.
_skipped_postgres: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and "postgres" in report.keywords:
        _skipped_postgres.append(report.nodeid)


def _ci_problems() -> list[str]:
    if not os.environ.get("CI"):
        return []
    problems = []
    if _selected_backends() != BACKENDS:
        problems.append("CI must run the suite on both databases: unset ROLLOUTD_TEST_DB")
    if _skipped_postgres:
        problems.append(f"{len(_skipped_postgres)} Postgres tests were skipped under CI, e.g.:")
        problems += [f"  {nodeid}" for nodeid in _skipped_postgres[:5]]
    return problems


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _ci_problems():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _ci_problems():
        terminalreporter.write_line(line, red=True)
