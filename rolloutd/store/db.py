"""Connecting to the database: URLs, engines, sessions, schema checks and upgrades.

Operators write ``postgresql://`` or ``sqlite:///`` URLs; this module picks the driver and tunes
each database for a small controller (SQLite: WAL, foreign keys, a busy timeout, and transactions
that take the write lock at BEGIN so that writers queue; Postgres: pre-ping and a short connect
timeout). It turns "cannot connect" into :class:`~rolloutd.errors.DatabaseUnavailable`, whose
message names the host but never the password.

Start-up checks the schema with plain SQL (:func:`check_revision`), so the CLI never imports
alembic; only :func:`upgrade` does, lazily. The ORM too is imported only to make sessions:
the commands that only read connect without it.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError, ProgrammingError

from rolloutd.errors import (
    BadInput,
    DatabaseUnavailable,
    PermanentError,
    Refused,
    SchemaOutOfDate,
)
from rolloutd.store.schema import SCHEMA_REVISION

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

URL_SETTING = "ROLLOUTD_DATABASE_URL"
DEFAULT_URL = "sqlite:///rolloutd.db"
CONNECT_TIMEOUT_SECONDS = 5
SQLITE_BUSY_TIMEOUT_MS = 5000

_POSTGRES_DRIVER = "postgresql+psycopg"
_POSTGRES_NAMES = frozenset({"postgres", "postgresql", _POSTGRES_DRIVER})
_SQLITE_NAMES = frozenset({"sqlite", "sqlite+pysqlite"})
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_EXPECTED = "expected a postgresql:// or sqlite:/// URL"


def normalise_url(url: str | URL) -> URL:
    """Parse an operator's database URL and choose the driver rolloutd ships with.

    ``postgres://`` and ``postgresql://`` become ``postgresql+psycopg://`` (psycopg 3);
    ``sqlite:///path`` is kept as written.

    :raises BadInput: for any other URL, or an SQLite URL without a file (an in-memory database
        would vanish between the daemon and ``rolloutctl``). The URL itself is not repeated in
        the message, as it may hold a password.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise BadInput.one(URL_SETTING, "", _EXPECTED) from None
    if parsed.drivername in _POSTGRES_NAMES:
        return parsed.set(drivername=_POSTGRES_DRIVER)
    if parsed.drivername in _SQLITE_NAMES and parsed.database not in (None, "", ":memory:"):
        return parsed
    raise BadInput.one(URL_SETTING, "", _EXPECTED)


def describe(url: str | URL) -> str:
    """Name the driver, host, port and database of ``url``, leaving out the password.

    The query string is left out too: libpq accepts ``?password=`` there.
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"{parsed.drivername}:///{parsed.database}"
    host = parsed.host or _query_value(parsed, "host") or "[local socket]"
    port = parsed.port or _query_value(parsed, "port") or 5432
    user = f"{parsed.username}@" if parsed.username else ""
    return f"{parsed.drivername}://{user}{host}:{port}/{parsed.database or ''}"


def _query_value(url: URL, key: str) -> str | None:
    value = url.query.get(key)
    if isinstance(value, tuple):
        return value[0] if value else None
    return value


def make_engine(url: str | URL, *, lease_ttl_seconds: float | None = None) -> Engine:
    """Build an engine for ``url`` without connecting.

    ``lease_ttl_seconds`` marks the daemon's engine: on Postgres its sessions then give up
    a lock after a second, a transaction left idle for a third of the lease, and a dead
    peer after a few seconds of TCP keepalives, so a leader frozen inside a transaction
    (SIGSTOP, a cut network) cannot hold the lease row and block the standby's takeover.

    :raises BadInput: when the URL is neither Postgres nor an SQLite file.
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(parsed)
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", _begin_sqlite_transaction)
        return engine
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in parsed.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    if "application_name" not in parsed.query:
        connect_args["application_name"] = "rolloutd"
    if lease_ttl_seconds is not None:
        idle_ms = max(1000, int(lease_ttl_seconds * 1000 / 3))
        connect_args["options"] = (
            f"-c idle_in_transaction_session_timeout={idle_ms} -c lock_timeout=1000"
        )
        connect_args.update(
            keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=2
        )
    return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)


class RoundTrips:
    """How many times an engine's sessions waited on the database: statements (a batched
    ``executemany`` counts once), BEGINs, COMMITs, ROLLBACKs and Postgres pre-pings."""

    def __init__(self, engine: Engine) -> None:
        self._count = itertools.count()
        self._reads = 0
        self._reading = threading.Lock()
        for name in ("begin", "commit", "rollback", "before_cursor_execute"):
            event.listen(engine, name, self._one)
        if engine.pool._pre_ping:
            event.listen(engine.pool, "checkout", self._one)
        _COUNTED[engine] = self

    def _one(self, *_: Any) -> None:
        next(self._count)

    @property
    def count(self) -> int:
        """Round trips so far."""
        # itertools.count is atomic under the interpreter lock; reading it takes one value.
        with self._reading:
            total = next(self._count) - self._reads
            self._reads += 1
        return total


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite opens transactions on its own schedule, which breaks SAVEPOINT and lets the
    # PRAGMAs below land inside a transaction; take over with explicit BEGINs instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _begin_sqlite_transaction(connection: Any) -> None:
    # IMMEDIATE takes the write lock at BEGIN, so concurrent writers queue (busy_timeout) instead
    # of failing: with a deferred BEGIN, a transaction that read before another one committed
    # gets "database is locked" at its first write, with no wait and no retry.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Return the session factory used by the daemon and the CLI.

    Objects stay readable after commit (``expire_on_commit=False``): the CLI prints what it wrote
    after the transaction has ended, and a rollout's ``revision`` is exactly the one we committed.
    """
    from sqlalchemy.orm import sessionmaker

    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def translate_connect_errors(url: str | URL) -> Iterator[None]:
    """Turn a failure to reach the database inside the block into :class:`DatabaseUnavailable`.

    Connection failures (no statement yet, or the connection was lost) and an SQLite file that
    stayed locked past the busy timeout become "unavailable", which callers retry. A statement
    the connected role has no privilege for is refused. Other errors of a statement on a live
    connection (a constraint, a syntax error) pass through unchanged.

    :raises DatabaseUnavailable: naming the host, never the password.
    :raises Refused: when the role may not do what was asked (Postgres 42501).
    """
    try:
        yield
    except ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
            raise
        # The role connected as may not do this (rolloutd db roles): say so in one line,
        # without the statement.
        reason = str(exc.orig).strip().splitlines()[0]
        raise Refused(
            f"the database at {describe(url)} refused: {reason} (see rolloutd db roles)"
        ) from None
    except (OperationalError, InterfaceError) as exc:
        connecting = exc.statement is None or exc.connection_invalidated
        if not (connecting or _sqlite_busy(exc)):
            raise
        reason = _short_reason(exc, normalise_url(url))
        # Not chained: the driver's exception may echo the connection string.
        raise DatabaseUnavailable(
            f"cannot reach the database at {describe(url)}: {reason}"
        ) from None


def lock_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is Postgres giving up on a lock after ``lock_timeout`` (55P03)."""
    return (
        isinstance(exc, OperationalError)
        and getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE
    )


_LOCK_NOT_AVAILABLE = "55P03"
_INSUFFICIENT_PRIVILEGE = "42501"


def _sqlite_busy(exc: OperationalError | InterfaceError) -> bool:
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def _short_reason(exc: OperationalError | InterfaceError, url: URL) -> str:
    lines = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
    reason = lines[0].strip()
    if url.password:
        reason = reason.replace(str(url.password), "***")
    return reason


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """Run the block in one transaction: commit on success, roll back on any error.

    :raises DatabaseUnavailable: when the database cannot be reached.
    """
    bind = factory.kw["bind"]
    with translate_connect_errors(bind.url), factory.begin() as session:
        yield session


def check_revision(engine: Engine) -> None:
    """Check that the database schema is the one this rolloutd was built for.

    :raises DatabaseUnavailable: when the database cannot be reached.
    :raises SchemaOutOfDate: when there is no rolloutd schema, or it is at another revision,
        or no SQLite file at all: connecting would create one, and a read command run in
        the wrong directory would leave an empty ``rolloutd.db`` behind.
    """
    where = describe(engine.url)
    if engine.url.get_backend_name() == "sqlite" and not Path(engine.url.database or "").exists():
        raise SchemaOutOfDate(
            f"no rolloutd database at {where} (set {URL_SETTING}); to create one there:"
            " rolloutd db upgrade"
        )
    with translate_connect_errors(engine.url), engine.connect() as connection:
        found: str | None = None
        if inspect(connection).has_table("alembic_version"):
            found = connection.execute(
                text("SELECT version_num FROM alembic_version")
            ).scalar_one_or_none()
    if found is None:
        raise SchemaOutOfDate(
            f"the database at {where} has no rolloutd schema; run: rolloutd db upgrade"
        )
    if found != SCHEMA_REVISION:
        raise SchemaOutOfDate(
            f"the database at {where} is at revision {found}, this rolloutd needs "
            f"{SCHEMA_REVISION}; run: rolloutd db upgrade"
        )


def migrations_config_path() -> Path:
    """Return the ``alembic.ini`` of the source tree this package was imported from.

    :raises PermanentError: when the package was installed without its source tree, so there are
        no migrations to run.
    """
    root = Path(__file__).resolve().parents[2]
    ini = root / "alembic.ini"
    if not ini.is_file() or not (root / "migrations" / "env.py").is_file():
        raise PermanentError(
            f"cannot find the migrations: expected {ini} and {root / 'migrations'} beside the"
            " rolloutd package; run 'rolloutd db upgrade' from a source checkout"
            " (pip install -e .)"
        )
    return ini


def upgrade(url: str | URL, *, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision`` (default: the newest), creating it if empty.

    :raises BadInput: when the URL is not one rolloutd supports.
    :raises DatabaseUnavailable: when the database cannot be reached.
    :raises PermanentError: when the migrations cannot be found.
    """
    from alembic import command
    from alembic.config import Config

    parsed = normalise_url(url)
    config = Config(str(migrations_config_path()))
    config.attributes["url"] = parsed
    config.attributes["configure_logger"] = False
    with translate_connect_errors(parsed):
        command.upgrade(config, revision)


# The counters of engines, for round trips made on the driver's connection directly.
_COUNTED: weakref.WeakKeyDictionary[Engine, RoundTrips] = weakref.WeakKeyDictionary()


def count_driver_round_trip(connection: Connection) -> None:
    """Count one round trip made on ``connection``'s driver connection directly (a COPY),
    which SQLAlchemy's events do not see."""
    counter = _COUNTED.get(connection.engine)
    if counter is not None:
        counter._one()
