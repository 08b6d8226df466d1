"""The daemon tests' shared fixtures: the test's own connection to the daemons' Postgres
database, real ``rolloutd run`` processes on it, and a SQLite database file for a daemon.

A test module sets ``LEASE_TTL_SECONDS`` to run its daemons with another lease TTL than the
helpers' 3 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rolloutd.store.db import upgrade

from . import helpers
from .helpers import Daemons, Db, running_daemons

if TYPE_CHECKING:
    from conftest import StoreHandle


@pytest.fixture
def db(pg_store: StoreHandle) -> Iterator[Db]:
    """The test's own connection to the daemons' Postgres database."""
    database = Db(pg_store.url)
    yield database
    database.close()


@pytest.fixture
def daemons(
    pg_store: StoreHandle, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Daemons]:
    """Daemons on the test database, all killed at teardown (lease TTL: the module's
    ``LEASE_TTL_SECONDS``, else the helpers')."""
    ttl = float(getattr(request.module, "LEASE_TTL_SECONDS", helpers.LEASE_TTL_SECONDS))
    with running_daemons(pg_store.url, tmp_path, ttl=ttl) as pool:
        yield pool


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated SQLite database file of this test."""
    url = f"sqlite:///{tmp_path / 'rolloutd.db'}"
    upgrade(url)
    return url
