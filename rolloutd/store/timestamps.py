"""A timestamp column that is UTC and timezone-aware on every database.

Postgres keeps ``timestamptz`` as an instant and hands it back in the session's time zone;
SQLite keeps text and hands back naive datetimes. Comparing a naive datetime with the aware
``now`` the daemon passes in raises ``TypeError``, so every value is normalised to aware UTC on the
way in and on the way out, and naive values are refused before they reach the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC, as the column stores it; a naive one is refused (a caller's bug)."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"naive datetime {value.isoformat()} given; pass an aware UTC time")
    return value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that stores UTC and always returns aware UTC datetimes."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Refuse naive datetimes; convert aware ones to UTC."""
        return None if value is None else as_utc(value)

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        """Return aware UTC; SQLite's naive values were written as UTC."""
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime from the database, got {type(value).__name__}")
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
