"""A weight change that failed before a rollback must never be replayed after it, on real
HAProxy, NGINX and the LiteLLM proxy: the rollback ends at 0% canary and the stale change is
kept as superseded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from rolloutd.errors import TemporaryError
from rolloutd.routers.base import Router, RouterState
from rolloutd.store import queries
from rolloutd.store.models import Action
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

    from tests.routers.litellm_service import LiteLLMService
    from tests.routers.services import HAProxyService, NginxService

    Service = HAProxyService | NginxService | LiteLLMService


class Wedged:
    """A real driver behind a connection that times out on weight changes when told to.

    Every weight asked for is recorded, whether or not it reached the proxy. While ``down``
    is set every change times out; otherwise the next ``failures`` changes do.
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        self.down = False
        self.failures = 0
        self.asked: list[int] = []

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        self.asked.append(weight)
        if self.down or self.failures > 0:
            self.failures = max(self.failures - 1, 0)
            raise TemporaryError(f"setting {weight}% canary: socket timed out")
        self.router.set_weight(weight, mirror=mirror)

    def read_weight(self) -> RouterState:
        return self.router.read_weight()

    def check(self) -> None:
        self.router.check()

    def since_rollback(self) -> list[int]:
        """The weights asked for from the rollback's weight 0 on (the first 0 asked for)."""
        return self.asked[self.asked.index(0) :] if 0 in self.asked else []


def _service(request: pytest.FixtureRequest, proxy: str) -> Service:
    service: Service = request.getfixturevalue(f"{proxy}_service")
    service.router().set_weight(0)
    request.addfinalizer(lambda: service.router().set_weight(0))
    return service


def _into_step_1_with_the_change_pending(h: Harness, wedged: Wedged, failures: int) -> None:
    """Verify and bake 5%; the change to 25% then times out and stays pending."""
    assert h.tick() == "running"
    assert h.tick(seconds=5) == "running"
    wedged.failures = failures
    assert h.tick(hours=48) == "running"
    assert wedged.asked == [5, 25]
    assert wedged.read_weight() == RouterState(5)


def _statuses_of_weight(h: Harness, weight: int) -> list[str]:
    """The status of every ``set_weight`` action of the rollout that asked for ``weight``."""
    with h.store.sessions() as session:
        rows = session.scalars(
            select(Action).where(Action.rollout_id == h.rollout_id, Action.kind == "set_weight")
        ).all()
        return [row.status for row in rows if row.payload.get("weight") == weight]


def _expect_rolled_back_at_zero(
    h: Harness, wedged: Wedged, state: str, reading: RouterState
) -> None:
    """The rollout ended at 0% on the proxy, sent nothing above 0 since the rollback began, and
    kept the stale 25% change as superseded."""
    assert (state, reading.weight) == ("rolled_back", 0)
    assert [w for w in wedged.since_rollback() if w > 0] == []
    assert _statuses_of_weight(h, 25) == ["superseded"]


@pytest.mark.parametrize("proxy", ["haproxy", "nginx", "litellm"])
def test_a_failed_weight_change_then_a_breach_ends_rolled_back_at_zero(
    store: StoreHandle, request: pytest.FixtureRequest, proxy: str
) -> None:
    """A 25% change that timed out before an OOM rollback is never sent after it; the proxy
    ends at 0% canary and the stale change is recorded as superseded."""
    service = _service(request, proxy)
    wedged = Wedged(service.router())
    h = Harness(store, router=wedged)
    # The socket stays wedged for the change and its first replay, then answers again.
    _into_step_1_with_the_change_pending(h, wedged, failures=2)
    h.metrics.set("oom_events", "canary", 1)
    assert h.tick(seconds=5) == "rolling_back"
    states = [h.tick(minutes=5) for _ in range(4)]
    _expect_rolled_back_at_zero(h, wedged, states[-1], service.router().read_weight())


@pytest.mark.parametrize("proxy", ["haproxy", "nginx", "litellm"])
def test_abort_while_a_25_percent_change_is_pending_ends_at_zero(
    store: StoreHandle, request: pytest.FixtureRequest, proxy: str
) -> None:
    """An operator's abort while the 25% change is pending ends at 0% canary on the proxy and
    the pending change is never sent after the abort."""
    service = _service(request, proxy)
    wedged = Wedged(service.router())
    h = Harness(store, router=wedged)
    _into_step_1_with_the_change_pending(h, wedged, failures=2)
    h.command("abort", reason="the canary's tool calls look wrong")
    assert h.tick(seconds=5) == "rolling_back"
    states = [h.tick(minutes=5) for _ in range(4)]
    _expect_rolled_back_at_zero(h, wedged, states[-1], service.router().read_weight())


def test_promote_is_refused_while_the_rollback_is_failing(
    store: StoreHandle, request: pytest.FixtureRequest
) -> None:
    """While the rollback's weight 0 keeps timing out, a promote is rejected, the rollout stays
    rolling back and no weight above 0 is sent."""
    service = _service(request, "haproxy")
    wedged = Wedged(service.router())
    h = Harness(store, router=wedged)
    _into_step_1_with_the_change_pending(h, wedged, failures=1)
    wedged.down = True
    h.metrics.set("oom_events", "canary", 1)
    assert h.tick(seconds=5) == "rolling_back"
    # rolloutctl refuses a promote once it sees the rollback; this one passed its check just
    # before the rollback was written, so only the daemon is left to refuse it.
    with store.sessions.begin() as session:
        queries.add_command(
            session,
            rollout_id=h.rollout_id,
            kind="promote",
            args={},
            actor="alice",
            reason="the OOM was a fluke",
            now=h.clock(),
        )
    states = [h.tick(minutes=5) for _ in range(4)]
    assert set(states) == {"rolling_back"}
    assert "command_rejected" in h.events()
    assert "promoted" not in h.events()
    assert [w for w in wedged.since_rollback() if w > 0] == []
    assert service.router().read_weight() == RouterState(5)
