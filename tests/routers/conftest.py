"""Fixtures for the router tests: the two HTTP pools, a real haproxy, a real nginx and a real
LiteLLM proxy (with its own two simulated vLLM replicas).

The servers live for the whole session (starting them costs tenths of a second each); every
test that uses one starts from weight 0 through its own driver. Tests that break a server
(restart it, corrupt its configuration) start their own instance instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.routers.litellm_service import LiteLLMService
from tests.routers.services import HAProxyService, NginxService, Pools, find_binary


@pytest.fixture(scope="session")
def pools() -> Iterator[Pools]:
    """The stable and canary HTTP pools every proxy forwards to."""
    both = Pools()
    yield both
    both.close()


def start_haproxy(directory: Path, pools: Pools) -> HAProxyService:
    """Start a fresh haproxy in ``directory`` (the caller stops it)."""
    service = HAProxyService(directory, pools, find_binary("haproxy"))
    service.start()
    return service


def start_nginx(directory: Path, pools: Pools) -> NginxService:
    """Start a fresh nginx in ``directory`` (the caller stops it)."""
    service = NginxService(directory, pools, find_binary("nginx"))
    service.start()
    return service


@pytest.fixture(scope="session")
def haproxy_service(
    tmp_path_factory: pytest.TempPathFactory, pools: Pools
) -> Iterator[HAProxyService]:
    """A haproxy shared by the session; killed at the end."""
    service = start_haproxy(tmp_path_factory.mktemp("haproxy"), pools)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def nginx_service(tmp_path_factory: pytest.TempPathFactory, pools: Pools) -> Iterator[NginxService]:
    """An nginx shared by the session; stopped at the end."""
    service = start_nginx(tmp_path_factory.mktemp("nginx"), pools)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def litellm_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteLLMService]:
    """A LiteLLM proxy shared by the session, with rolloutd's plugin; stopped at the end."""
    service = LiteLLMService(tmp_path_factory.mktemp("litellm"))
    try:
        service.start()
        yield service
    finally:
        service.close()
