"""The router contract, run against every driver: the memory twin, file, HAProxy, NGINX and
the LiteLLM proxy.

HAProxy, NGINX and LiteLLM are the real servers (see ``conftest.py``); a driver passes when
what it reads back is what the load balancer does, whoever changed it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rolloutd.errors import PermanentError
from rolloutd.routers.base import MemoryRouter, Router, RouterState
from rolloutd.routers.filedriver import FileRouter
from rolloutd.routers.haproxy_api import RuntimeAPI
from rolloutd.routers.litellm_split import GroupWeights
from rolloutd.routers.nginx_conf import Split, render
from tests.routers.litellm_service import GROUP, LiteLLMService
from tests.routers.services import BACKEND, HAProxyService, NginxService


@dataclass
class Case:
    """A driver under test, how to build a second driver for the same balancer, and how to
    change the balancer behind the driver's back (None for the memory twin)."""

    router: Router
    again: Callable[[], Router]
    tamper: Callable[[int], None] | None
    mirrors: bool


def _memory(request: pytest.FixtureRequest) -> Case:
    router = MemoryRouter()
    return Case(router, lambda: router, None, mirrors=True)


def _file(request: pytest.FixtureRequest) -> Case:
    path: Path = request.getfixturevalue("tmp_path") / "weights.json"

    def tamper(weight: int) -> None:
        path.write_text(json.dumps({"canary_weight": weight, "mirror": False}))

    return Case(FileRouter(path), lambda: FileRouter(path), tamper, mirrors=True)


def _haproxy(request: pytest.FixtureRequest) -> Case:
    service: HAProxyService = request.getfixturevalue("haproxy_service")

    def tamper(weight: int) -> None:
        # Weights no rolloutd would write, but giving the canary exactly `weight` percent.
        api = RuntimeAPI(str(service.socket))
        plan = [("gpu-d", weight), ("gpu-e", 0), ("gpu-a", 100 - weight)]
        assert not api.set_weights(BACKEND, [*plan, ("gpu-b", 0), ("gpu-c", 0)])

    return Case(service.router(), service.router, tamper, mirrors=False)


def _nginx(request: pytest.FixtureRequest) -> Case:
    service: NginxService = request.getfixturevalue("nginx_service")

    def tamper(weight: int) -> None:
        service.include.write_text(render(service.names, Split(weight, False)))
        service.reload()

    return Case(service.router(), service.router, tamper, mirrors=True)


def _litellm(request: pytest.FixtureRequest) -> Case:
    service: LiteLLMService = request.getfixturevalue("litellm_service")

    def tamper(weight: int) -> None:
        # The weights file edited by hand: the plugin applies it on its next look.
        service.weights_path.write_text(GroupWeights(GROUP, weight).to_json())

    return Case(service.router(), service.router, tamper, mirrors=True)


DRIVERS = {
    "memory": _memory,
    "file": _file,
    "haproxy": _haproxy,
    "nginx": _nginx,
    "litellm": _litellm,
}


def _from_zero(request: pytest.FixtureRequest) -> Iterator[Case]:
    built = DRIVERS[request.param](request)
    built.router.set_weight(0)
    yield built
    built.router.set_weight(0)


@pytest.fixture(params=sorted(DRIVERS))
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    """Each driver in turn, starting from weight 0 without mirroring."""
    yield from _from_zero(request)


@pytest.fixture(params=sorted(set(DRIVERS) - {"memory"}))
def outside_case(request: pytest.FixtureRequest) -> Iterator[Case]:
    """Each driver of a balancer that can be changed behind its back (not the memory twin)."""
    yield from _from_zero(request)


@pytest.mark.parametrize("weight", [0, 1, 5, 25, 50, 99, 100])
def test_reads_back_each_weight_it_sets(case: Case, weight: int) -> None:
    """Every whole percent set (ends included) is what the balancer reads back."""
    case.router.set_weight(weight)
    assert case.router.read_weight() == RouterState(weight, False)


def test_setting_the_same_weight_twice_is_harmless(case: Case) -> None:
    """Set-weight is idempotent: repeating it leaves the same read-back."""
    case.router.set_weight(25)
    case.router.set_weight(25)
    assert case.router.read_weight() == RouterState(25, False)


@pytest.mark.parametrize("bad", [-1, 101, True, 2.5, "5"])
def test_rejects_a_weight_outside_0_to_100_and_keeps_the_old_one(case: Case, bad: object) -> None:
    """A weight that is not a whole percent raises ValueError and changes nothing."""
    case.router.set_weight(5)
    with pytest.raises(ValueError, match="whole percent"):
        case.router.set_weight(bad)  # type: ignore[arg-type]
    assert case.router.read_weight() == RouterState(5, False)


def test_check_passes_on_a_correctly_configured_balancer(case: Case) -> None:
    """The start-up check accepts the balancer the tests configured properly."""
    case.router.check()


def test_a_new_driver_reads_what_an_earlier_one_set(case: Case) -> None:
    """Read-back comes from the balancer, not from the driver's memory."""
    case.router.set_weight(25)
    assert case.again().read_weight() == RouterState(25, False)


def test_reads_back_a_change_made_behind_its_back(outside_case: Case) -> None:
    """A weight changed by someone else is what read-back reports (drift is visible)."""
    assert outside_case.tamper is not None
    outside_case.router.set_weight(25)
    outside_case.tamper(5)
    assert outside_case.router.read_weight().weight == 5


def test_mirroring_is_read_back_or_refused_without_change(case: Case) -> None:
    """A shadow step either mirrors and reads back so, or is refused with weights unchanged."""
    if case.mirrors:
        case.router.set_weight(0, mirror=True)
        assert case.router.read_weight() == RouterState(0, True)
        case.router.set_weight(0)
        assert case.router.read_weight() == RouterState(0, False)
    else:
        case.router.set_weight(5)
        with pytest.raises(PermanentError, match="cannot mirror"):
            case.router.set_weight(0, mirror=True)
        assert case.router.read_weight() == RouterState(5, False)
