"""Waiting, on Postgres, until a transaction of the test is blocked on a lock."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text

if TYPE_CHECKING:
    from conftest import StoreHandle


def wait_for_lock_wait(store: StoreHandle, what: str, timeout: float = 5.0) -> None:
    """Return once a backend of ``store``'s database waits on a lock; fail naming ``what``
    (the wait that never came) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with store.engine.connect() as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar()
            if waiting:
                return
            watcher.rollback()
            time.sleep(0.01)
    pytest.fail(f"{what} never waited on a lock")
