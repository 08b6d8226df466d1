"""The reconciler driving real HAProxy, NGINX and the LiteLLM proxy: a step counts only once
it is read back, and a change made behind rolloutd's back is found and undone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rolloutd.routers.base import RouterState
from rolloutd.routers.haproxy_api import RuntimeAPI
from rolloutd.routers.litellm_split import GroupWeights
from rolloutd.routers.nginx_conf import Split, render
from tests.reconcile.test_reconcile import Harness
from tests.routers.litellm_service import GROUP, LiteLLMService
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


def _tamper_litellm(service: LiteLLMService) -> None:
    service.weights_path.write_text(GroupWeights(GROUP, 50).to_json())


TAMPER = {"haproxy": _tamper_haproxy, "nginx": _tamper_nginx, "litellm": _tamper_litellm}


@pytest.mark.parametrize("proxy", sorted(TAMPER))
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
    TAMPER[proxy](service)
    assert service.router().read_weight() == RouterState(50)
    h.tick(seconds=5)
    assert "drift" in h.events()
    assert service.router().read_weight() == RouterState(5)
    router.set_weight(0)
