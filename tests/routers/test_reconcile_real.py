"""The reconciler driving real HAProxy and NGINX: a step counts only once it is read back,
and a change made behind rolloutd's back is found and undone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rolloutd.routers.base import RouterState
from rolloutd.routers.haproxy_api import RuntimeAPI
from rolloutd.routers.nginx_conf import Split, render
from tests.reconcile.test_reconcile import Harness
from tests.routers.services import BACKEND, HAProxyService, NginxService

if TYPE_CHECKING:
    from conftest import StoreHandle


def _tamper_haproxy(service: HAProxyService) -> None:
    # 50% of the weight on the canary, set by hand.
    weights = [("gpu-d", 100), ("gpu-e", 0), ("gpu-a", 100), ("gpu-b", 0), ("gpu-c", 0)]
    assert not RuntimeAPI(str(service.socket)).set_weights(BACKEND, weights)


def _tamper_nginx(service: NginxService) -> None:
    service.include.write_text(render(service.names, Split(50, False)))
    service.reload()


@pytest.mark.parametrize("proxy", ["haproxy", "nginx"])
def test_steps_are_verified_on_the_real_proxy_and_drift_is_repaired(
    store: StoreHandle, request: pytest.FixtureRequest, proxy: str
) -> None:
    """The first step reaches 5% on the proxy; a hand-made 50% is seen on the next tick,
    recorded as drift, and put back to 5%."""
    service = request.getfixturevalue(f"{proxy}_service")
    router = service.router()
    router.set_weight(0)
    h = Harness(store, router=router)
    assert h.tick() == "running"
    assert service.router().read_weight() == RouterState(5)
    h.tick(seconds=5)
    (_tamper_haproxy if proxy == "haproxy" else _tamper_nginx)(service)
    assert service.router().read_weight() == RouterState(50)
    h.tick(seconds=5)
    assert "drift" in h.events()
    assert service.router().read_weight() == RouterState(5)
    router.set_weight(0)
