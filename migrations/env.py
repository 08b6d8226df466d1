"""Alembic environment for rolloutd: one set of migrations for Postgres and SQLite.

The database comes from, in order: a connection the caller put in ``config.attributes
["connection"]``, a URL in ``config.attributes["url"]`` (what ``rolloutd db upgrade`` does), or
``ROLLOUTD_DATABASE_URL`` (default ``sqlite:///rolloutd.db``), always through
:func:`rolloutd.store.db.normalise_url` so the CLI and alembic agree on the driver.

Migrations render in batch mode so the same file can alter tables on SQLite, and on SQLite they
run with foreign keys switched off (batch mode copies and drops tables, which would otherwise
cascade or fail), followed by a ``foreign_key_check`` before the commit.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import URL, Connection

from rolloutd.errors import PermanentError
from rolloutd.store.db import DEFAULT_URL, URL_SETTING, make_engine, normalise_url
from rolloutd.store.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> URL:
    given = config.attributes.get("url")
    if given is not None:
        return normalise_url(given)
    return normalise_url(os.environ.get(URL_SETTING) or DEFAULT_URL)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=True,
        # rolloutd's SQLite engine issues real BEGINs, so SQLite DDL is transactional too.
        transactional_ddl=True,
    )


def run_migrations_offline() -> None:
    """Print the SQL for the migrations instead of running them (``alembic upgrade --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on the caller's connection or on a fresh engine."""
    given: Connection | None = config.attributes.get("connection")
    if given is not None:
        _configure(given)
        with context.begin_transaction():
            context.run_migrations()
        return

    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                _run_sqlite(connection)
            else:
                _configure(connection)
                with context.begin_transaction():
                    context.run_migrations()
    finally:
        engine.dispose()


def _run_sqlite(connection: Connection) -> None:
    # PRAGMA foreign_keys is ignored inside a transaction: set it on the raw connection first.
    raw = connection.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys=OFF")
    try:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise PermanentError(
                    f"the migration left {len(broken)} rows with dangling foreign keys,"
                    f" first: {tuple(broken[0])}; nothing was changed"
                )
    finally:
        raw.execute("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
