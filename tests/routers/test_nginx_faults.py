"""NGINX driver faults: a failing config test, nginx down, hand edits, missing wiring.

A refused change must leave the include byte for byte (and mtime for mtime) as it was, so
nginx keeps running the split it had, and the error must say which file and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.routers.base import RouterState
from rolloutd.routers.nginx_conf import Split, render
from tests.routers.conftest import start_nginx
from tests.routers.services import NginxService, Pools, route, session_ids

SESSIONS = session_ids(400, seed=11)


@pytest.fixture(scope="module")
def own_nginx(tmp_path_factory: pytest.TempPathFactory, pools: Pools) -> Iterator[NginxService]:
    """An nginx of this module alone: its configuration gets broken on purpose."""
    service = start_nginx(tmp_path_factory.mktemp("nginx-faults"), pools)
    yield service
    service.stop()


@pytest.fixture
def nginx(own_nginx: NginxService) -> Iterator[NginxService]:
    """The module's nginx, running, with a clean configuration and the split at 5%."""
    own_nginx.extra.write_text("# extra directives for the tests\n")
    if not own_nginx.pid_file.exists():
        own_nginx.start()
    own_nginx.router().set_weight(5)
    yield own_nginx


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_a_failing_config_test_puts_the_include_back_and_nginx_keeps_its_split(
    nginx: NginxService,
) -> None:
    """When `nginx -t` fails the error names the config and nginx's complaint, the include is
    restored exactly, and sessions keep their pools; once fixed, the change goes through."""
    router = nginx.router()
    before, canary_before = _snapshot(nginx.include), route(nginx.port, SESSIONS)
    nginx.extra.write_text("bogus_directive on;\n")
    with pytest.raises(PermanentError) as refused:
        router.set_weight(25)
    message = str(refused.value)
    assert f"nginx -t failed for {nginx.config}" in message
    assert 'unknown directive "bogus_directive"' in message
    assert f"the previous {nginx.include} was put back" in message
    assert _snapshot(nginx.include) == before
    assert router.read_weight() == RouterState(5, False)
    assert route(nginx.port, SESSIONS) == canary_before
    nginx.extra.write_text("# fixed\n")
    router.set_weight(25)
    assert router.read_weight() == RouterState(25, False)


def test_nginx_down_is_a_temporary_error_naming_the_pid_file(nginx: NginxService) -> None:
    """With no master running, set and read raise TemporaryError naming the pid file, and the
    include is left as it was."""
    router = nginx.router()
    before = _snapshot(nginx.include)
    nginx.stop()
    for call in (router.read_weight, lambda: router.set_weight(25)):
        with pytest.raises(TemporaryError, match=f"pid file {nginx.pid_file}"):
            call()
    assert _snapshot(nginx.include) == before
    nginx.start()
    assert router.read_weight() == RouterState(5, False)


def test_a_stale_pid_file_is_not_taken_for_a_live_master(nginx: NginxService) -> None:
    """A pid file naming a process that is not an nginx master is not trusted."""
    router = nginx.router(pid_file=nginx.directory / "stale.pid")
    (nginx.directory / "stale.pid").write_text("1\n")
    with pytest.raises(TemporaryError, match="is not an nginx master"):
        router.read_weight()


def test_an_include_changed_without_a_reload_is_not_trusted(nginx: NginxService) -> None:
    """A file nginx has not loaded yet is not read back as the split nginx runs."""
    router = nginx.router(verify_url=None)
    nginx.include.write_text(render(nginx.names, Split(50, False)))
    with pytest.raises(TemporaryError, match=r"changed after nginx .* last loaded"):
        router.read_weight()
    nginx.reload()
    assert router.read_weight() == RouterState(50, False)


def test_a_hand_written_split_that_is_no_whole_percent_is_an_error_naming_the_file(
    nginx: NginxService,
) -> None:
    """nginx may run a 33.5% split written by hand; read-back reports it as unreadable."""
    nginx.include.write_text(
        render(nginx.names, Split(5, False)).replace(
            "    5%      llm_canary", "    33.5% llm_canary"
        )
    )
    nginx.reload()
    with pytest.raises(TemporaryError, match=f"cannot parse nginx include {nginx.include}"):
        nginx.router(verify_url=None).read_weight()


def test_read_back_without_verify_url_uses_the_include_and_the_master(
    nginx: NginxService,
) -> None:
    """Without a verify location the driver still reads back what it set."""
    router = nginx.router(verify_url=None)
    router.set_weight(25, mirror=True)
    assert router.read_weight() == RouterState(25, True)
    assert Counter(route(nginx.port, SESSIONS[:100]))["canary"] > 0


def _unwired(nginx: NginxService, tmp_path: Path, *, remove: str) -> Path:
    config = tmp_path / "nginx.conf"
    text = nginx.config.read_text()
    assert remove in text
    config.write_text(text.replace(remove, ""))
    return config


def test_check_refuses_a_config_that_does_not_include_the_split(
    nginx: NginxService, tmp_path: Path
) -> None:
    """An include at another path than the plan's would change nothing: check() says so."""
    elsewhere = tmp_path / "other-split.conf"
    elsewhere.write_bytes(nginx.include.read_bytes())
    config = tmp_path / "nginx.conf"
    config.write_text(
        nginx.config.read_text().replace(f"include {nginx.include};", f"include {elsewhere};")
    )
    with pytest.raises(PermanentError, match=f"does not include {nginx.include}"):
        nginx.router(config_path=config).check()


def test_check_refuses_a_config_that_never_routes_by_the_split(
    nginx: NginxService, tmp_path: Path
) -> None:
    """Without `proxy_pass http://$rolloutd_pool` nothing follows the split."""
    config = _unwired(nginx, tmp_path, remove="proxy_pass http://$rolloutd_pool;")
    with pytest.raises(PermanentError, match=r"nothing in .* uses \$rolloutd_pool"):
        nginx.router(config_path=config).check()


def test_check_refuses_an_upstream_the_config_does_not_define(nginx: NginxService) -> None:
    """A plan naming an upstream nginx lacks would send sessions nowhere."""
    with pytest.raises(PermanentError, match="no `upstream llm_next"):
        nginx.router(canary_upstream="llm_next").check()


def test_mirroring_without_the_mirror_location_is_refused_and_changes_nothing(
    nginx: NginxService, tmp_path: Path
) -> None:
    """A shadow step on a config with no mirror location fails, the include untouched."""
    config = _unwired(nginx, tmp_path, remove="if ($rolloutd_pool_mirror = 0) { return 204; }")
    before = _snapshot(nginx.include)
    with pytest.raises(PermanentError, match=r"uses \$rolloutd_pool_mirror.*put back"):
        nginx.router(config_path=config).set_weight(0, mirror=True)
    assert _snapshot(nginx.include) == before
