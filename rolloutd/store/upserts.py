"""``INSERT … ON CONFLICT`` for the two databases rolloutd runs on.

Idempotent writes (deduplicated events, keyed actions, step timestamps) must not abort the
surrounding transaction when the row already exists, which a plain INSERT that fails on a unique
index does on Postgres. Both Postgres and SQLite speak ``ON CONFLICT``, through separate
SQLAlchemy constructs; this module picks the right one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from sqlalchemy.orm import Session

from rolloutd.errors import PermanentError
from rolloutd.store.models import Base

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

ConflictInsert: TypeAlias = "postgresql.Insert | sqlite.Insert"


def insert_on_conflict(session: Session, model: type[Base]) -> ConflictInsert:
    """Return an INSERT into ``model``'s table that supports ``on_conflict_do_*``.

    :raises PermanentError: on a database other than Postgres or SQLite.
    """
    # The dialect modules are imported here: loading both at start-up costs the CLI ~0.1 s.
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(model)
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(model)
    raise PermanentError(f"rolloutd does not support the {dialect!r} database")


def insert_unless_exists(session: Session, model: type[Base], **values: Any) -> int | None:
    """Insert one row into ``model``'s table unless it would break a unique key.

    :returns: the new row's id, or None when a row with the same key exists already (nothing
        was written, and the surrounding transaction goes on).
    """
    statement = insert_on_conflict(session, model).values(**values).on_conflict_do_nothing()
    new_id: int | None = session.scalar(statement.returning(model.__table__.c.id))
    return new_id
