"""Property tests of the reconciler against a real database and the in-memory router twin.

Hypothesis draws interleavings of ticks, router faults (timeouts, refusals, an outage),
operator commands, breaches, restarts and crashes between a decision and its attempt. After
every weight the router is sent, and after every prefix once the router answers again:

- every weight sent is the stored desired fact's: no stale attempt is ever performed;
- once a rollback began, no weight above 0 is ever sent;
- once the faults clear, the router converges to the desired fact, and a rollback ends
  ``rolled_back`` at 0%.
"""

from __future__ import annotations

import copy
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rolloutd.core.progress import Progress
from rolloutd.errors import PermanentError, Refused, TemporaryError
from rolloutd.reconcile import NotLeading
from rolloutd.routers.base import MemoryRouter, RouterState
from rolloutd.store import queries
from tests.reconcile.test_reconcile import PLAN, Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

EXAMPLES = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Crash(BaseException):
    """The process dies (kill -9) as it is about to send a weight."""


@dataclass
class FaultyRouter(MemoryRouter):
    """The memory router with faults turned on and off by the test, checking every weight it
    is sent against the desired fact stored in the database at that moment."""

    store: Any = None
    rollout_id: int = 0
    failing: int = 0  # the next n changes time out
    down: bool = False  # every call times out
    refused: int | None = None  # changes to this weight are refused for good
    crash: bool = False  # the next change kills the process
    sent: list[tuple[int, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        progress = self._stored()
        assert progress.desired is not None
        # The safety properties, checked at the moment of sending.
        assert (weight, mirror) == (progress.desired.weight, progress.desired.mirror)
        if progress.rollback is not None:
            assert weight == 0
        if self.crash:
            self.crash = False
            raise Crash
        if self.down:
            raise TemporaryError("runtime API socket timed out")
        if self.failing:
            self.failing -= 1
            raise TemporaryError("runtime API socket timed out")
        if weight == self.refused:
            raise PermanentError("No such server: llm/gpu-d")
        self.sent.append((weight, mirror))
        super().set_weight(weight, mirror=mirror)

    def read_weight(self) -> RouterState:
        if self.down:
            raise TemporaryError("runtime API socket timed out")
        return super().read_weight()

    def heal(self) -> None:
        """Every fault clears."""
        self.failing, self.down, self.refused, self.crash = 0, False, None, False

    def _stored(self) -> Progress:
        with self.store.sessions() as session:
            return Progress.from_storage(queries.get_rollout(session, self.rollout_id).progress)


# The router fault each drawn fault operation turns on: to its argument, or to True.
FAULTS = {"fail": "failing", "down": "down", "refuse": "refused", "crash": "crash"}
SECONDS = [1, 5, 30, 301, 3600, 48 * 3600 + 60]
TICK = st.tuples(st.just("tick"), st.sampled_from(SECONDS))
OPS = st.one_of(
    TICK,
    TICK,
    TICK,
    st.tuples(st.just("fail"), st.integers(1, 3)),
    st.tuples(st.just("down"), st.none()),
    st.tuples(st.just("up"), st.none()),
    st.tuples(st.just("refuse"), st.sampled_from([5, 25, 100])),
    st.tuples(st.just("crash"), st.none()),
    st.tuples(st.just("restart"), st.none()),
    st.tuples(st.just("abort"), st.none()),
    st.tuples(st.just("promote"), st.none()),
    st.tuples(st.just("oom"), st.none()),
)


class World:
    """One rollout of the reconciler tests' plan, under a service of its own."""

    def __init__(self, store: StoreHandle) -> None:
        plan = copy.deepcopy(PLAN)
        plan["service"] = f"svc-{uuid.uuid4().hex[:8]}"
        self.router = FaultyRouter()
        self.h = Harness(store, router=self.router, plan=plan)
        self.router.store, self.router.rollout_id = store, self.h.rollout_id
        self.store = store

    def restart(self) -> None:
        """A new process takes over with a new reconciler (same lease, same database)."""
        h = self.h
        h.reconciler.close()
        h.reconciler = h.new_reconciler(instance=f"test-{uuid.uuid4().hex[:4]}")

    def tick(self, seconds: float = 0) -> None:
        """One tick; a crash restarts the process, a temporary failure is what ticks ride out."""
        try:
            self.h.tick(seconds=seconds)
        except Crash:
            self.restart()
        except (TemporaryError, NotLeading):
            pass

    def apply(self, op: str, arg: Any) -> None:
        """Play one drawn operation."""
        if op == "tick":
            self.tick(arg)
        elif op in FAULTS:
            setattr(self.router, FAULTS[op], True if arg is None else arg)
        elif op == "up":
            self.router.heal()
        elif op == "restart":
            self.restart()
        elif op == "oom":
            self.h.metrics.set("oom_events", "canary", 1)
        elif op in ("abort", "promote"):
            # rolloutctl refuses a command that makes no sense now; that is not under test.
            with suppress(Refused):
                self.h.command(op, reason="property test")

    def reach(self, step: int) -> None:
        """Run the happy path until ``step`` is reached on the router (the pause step needs a
        promote)."""
        for _ in range(12):
            progress = self.stored()
            verified = progress.step_verified_at is not None
            if progress.started_at is not None and progress.step_index >= step and verified:
                return
            if progress.step_verified_at is None:
                self.tick(5)
            elif progress.step_index == 2:
                self.apply("promote", None)
                self.tick(5)
            else:
                self.tick(48 * 3600 + 60)
        raise AssertionError(f"step {step} not reached")

    def stored(self) -> Progress:
        return self.router._stored()


@EXAMPLES
# The interleaving seen from outside: the change to 25% fails (and fails again when first
# replayed), an OOM rolls back, the router answers again.
@example(
    start=0,
    ops=[("fail", 2), ("tick", 48 * 3600 + 60), ("oom", None), ("tick", 301), ("tick", 301)],
)
@given(start=st.integers(0, 3), ops=st.lists(OPS, max_size=25))
def test_any_interleaving_sends_only_the_current_fact_and_converges(
    store: StoreHandle, start: int, ops: list[tuple[str, Any]]
) -> None:
    """Whatever happened, every weight sent was the current fact (0 once rolling back), and
    once the router answers again it reads the desired fact; a rollback ends at 0%."""
    world = World(store)
    world.reach(start)
    for op, arg in ops:
        world.apply(op, arg)
    world.router.heal()
    rolling_back = world.stored().rollback is not None
    for _ in range(6):  # past the longest backoff each time
        world.tick(301)
    progress = world.stored()
    if progress.desired is None:  # aborted before it started: nothing to serve
        assert progress.ended == "aborted" and world.router.sent == []
        return
    assert world.router.read_weight() == RouterState(
        progress.desired.weight, progress.desired.mirror
    )
    if rolling_back:
        assert progress.ended == "rolled_back"
        assert world.router.read_weight().weight == 0
