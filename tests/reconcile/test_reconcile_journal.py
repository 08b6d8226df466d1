"""The intent log under a router that keeps refusing: retries are paced, the alert is raised
once, and the rollout holds where it is. In-memory router, real database, fake clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.operations import plan_of
from rolloutd.routers.base import MemoryRouter
from rolloutd.store import queries
from rolloutd.store.models import Action
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


class RefusingRouter(MemoryRouter):
    """A load balancer that refuses every change to ``refused`` percent."""

    def __init__(self, refused: int) -> None:
        super().__init__()
        self.refused = refused

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        if weight == self.refused:
            raise PermanentError("No such server: llm/gpu-d")
        super().set_weight(weight, mirror=mirror)


def test_a_permanently_refused_change_alerts_once_and_holds(store: StoreHandle) -> None:
    """A 25% change the router refuses for two hours raises one stuck alert, is retried at most
    12 times an hour, and leaves the rollout at step 1, neither advanced nor rolled back."""
    h = Harness(store, router=RefusingRouter(refused=25))
    h.tick()
    h.tick(seconds=5)
    assert h.tick(hours=48) == "running"
    # A tick every 30 s: anything retried more often than the backoff allows would show.
    states = [h.tick(seconds=30) for _ in range(2 * 3600 // 30)]
    with store.sessions() as session:
        alerts = session.scalars(
            select(Action).where(Action.rollout_id == h.rollout_id, Action.kind == "alert")
        ).all()
        rollout = queries.get_rollout(session, h.rollout_id)
    # Without a progress deadline, nothing but the operator may give up on the step.
    assert plan_of(rollout).limits.progress_deadline is None
    stuck = [a.key for a in alerts if a.payload.get("topic") == "action_stuck"]
    assert len(stuck) == 1, stuck
    failures = h.events().count("action_failed")
    assert failures <= 12 * 2 + 1
    assert rollout.progress["step_index"] == 1
    (attempt,) = [a for a in _weights(store, h) if a.payload["weight"] == 25]
    assert attempt.status == "failed"
    assert not {"rolling_back", "rolled_back"} & set(states)
    assert h.router.read_weight().weight == 5


class FlakyRouter(MemoryRouter):
    """A load balancer whose socket times out on every change, optionally naming a delay."""

    def __init__(self, delay: float | None = None) -> None:
        super().__init__()
        self.delay = delay

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        raise TemporaryError("timed out on the runtime API socket", delay=self.delay)


def _weights(store: StoreHandle, h: Harness) -> list[Action]:
    """The rollout's weight attempts, oldest first."""
    with store.sessions() as session:
        query = select(Action).where(Action.rollout_id == h.rollout_id, Action.kind == "set_weight")
        return list(session.scalars(query.order_by(Action.id)))


def _waits(store: StoreHandle, h: Harness, failures: int) -> list[float]:
    """Tick exactly when the attempt may be retried, ``failures`` times; the waits it asked."""
    waits = []
    h.tick()  # the first attempt, made by the tick that starts the rollout
    for _ in range(failures):
        (attempt,) = _weights(store, h)
        assert attempt.next_attempt_at is not None
        waits.append((attempt.next_attempt_at - h.clock()).total_seconds())
        h.clock.now = attempt.next_attempt_at
        h.tick()
    return waits


def test_a_temporary_failure_backs_off_from_2_s_doubling_to_5_min(store: StoreHandle) -> None:
    """Every retry of a timed-out weight change waits twice as long as the last, up to 5 min,
    and a tick before that time sends nothing."""
    h = Harness(store, router=FlakyRouter())
    waits = _waits(store, h, 10)
    assert waits == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    (attempt,) = _weights(store, h)
    assert attempt.status == "pending" and attempt.attempts == 11
    h.tick(seconds=299)
    (attempt,) = _weights(store, h)
    assert attempt.attempts == 11


def test_a_temporary_failure_that_names_its_delay_waits_that_long(store: StoreHandle) -> None:
    """A TemporaryError with a delay (an NGINX reload in progress, say) sets the wait itself."""
    h = Harness(store, router=FlakyRouter(delay=7.0))
    assert _waits(store, h, 3) == [7, 7, 7]
