"""Tests of timestamps: aware UTC in, aware UTC out, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import StatementError

from rolloutd.store.queries import append_event, list_events
from rolloutd.store.timestamps import UTCDateTime

if TYPE_CHECKING:
    from conftest import StoreHandle

PARIS_SUMMER = timezone(timedelta(hours=2))


def test_aware_datetimes_round_trip_as_utc(store: StoreHandle) -> None:
    """A time written with any offset reads back, in a new session, as the same instant in UTC."""
    written = datetime(2025, 7, 1, 14, 30, 15, 123456, tzinfo=PARIS_SUMMER)
    with store.sessions() as session:
        append_event(session, rollout_id=None, kind="k", actor="a", detail="", now=written)
        session.commit()
    with store.sessions() as session:
        [event] = list_events(session, None)
    assert event.at == written
    assert event.at.tzinfo is UTC
    assert event.at == datetime(2025, 7, 1, 12, 30, 15, 123456, tzinfo=UTC)


def test_naive_datetimes_are_refused(store: StoreHandle) -> None:
    """Writing a naive datetime fails loudly instead of storing a time of unknown zone."""
    with store.sessions() as session, pytest.raises(StatementError, match="naive datetime"):
        append_event(
            session,
            rollout_id=None,
            kind="k",
            actor="a",
            detail="",
            now=datetime(2025, 7, 1, 12, 0),
        )


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.timezones(),
        # A wall time skipped by a DST change names no instant at all.
        allow_imaginary=False,
    )
)
# The hour Novokuznetsk repeated when DST ended in 1995.
@example(datetime(1995, 9, 24, 2, 0, tzinfo=ZoneInfo("Asia/Novokuznetsk")))
def test_sqlite_storage_preserves_the_instant(moment: datetime) -> None:
    """Whatever the zone, the value SQLite stores converts back to the same UTC instant."""
    column = UTCDateTime()
    dialect = sqlite.dialect()
    stored = column.process_bind_param(moment, dialect)
    assert stored is not None
    naive_as_sqlite_keeps_it = stored.replace(tzinfo=None)
    back = column.process_result_value(naive_as_sqlite_keeps_it, dialect)
    # Python never calls a time in a repeated (DST fold) hour equal to one in another zone,
    # so compare the instants.
    assert back == moment.astimezone(UTC)
    assert back is not None and back.tzinfo is UTC
