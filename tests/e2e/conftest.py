"""Fixtures for the end-to-end tests: a running :class:`~tests.e2e.stack.Stack` per test.

Every test gets its own fleet, HAProxy, Prometheus (fresh TSDB), traffic and daemon on a
fresh Postgres database, and every one of them is stopped when the test ends. Without
``prometheus`` or ``haproxy`` the tests fail, saying what to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from rolloutd.sim.exposition import Flavor
from tests.e2e.stack import Stack, running_stack
from tests.routers.services import find_binary

if TYPE_CHECKING:
    from conftest import StoreHandle


@pytest.fixture
def stack_for(pg_store: StoreHandle) -> Iterator[Callable[[Flavor], Stack]]:
    """Start the whole stack for a flavor (once per test); stopped at teardown."""
    find_binary("prometheus")
    find_binary("haproxy")
    opened: list[object] = []

    def start(flavor: Flavor = "triton") -> Stack:
        context = running_stack(pg_store.url, flavor)
        stack = context.__enter__()
        opened.append(context)
        return stack

    yield start
    for context in reversed(opened):
        context.__exit__(None, None, None)  # type: ignore[attr-defined]
