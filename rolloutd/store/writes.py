"""The two steps every table module writes with: add a row, and count what an UPDATE changed.

Both exist so that the modules say what they write, not how SQLAlchemy hands the result back:
``add_row`` flushes at once, so the row has its id (and a unique index has had its say) before
the caller's transaction goes on.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult, Result
from sqlalchemy.orm import Session

from rolloutd.store.models import Base

RowT = TypeVar("RowT", bound=Base)


def add_row(session: Session, row: RowT) -> RowT:
    """Add ``row`` to the session and flush it, so that it has its id; return it."""
    session.add(row)
    session.flush()
    return row


def rowcount(result: Result[Any]) -> int:
    """How many rows the UPDATE (or DELETE) that gave ``result`` changed."""
    return int(cast(CursorResult[Any], result).rowcount)
