"""The one road from the desired fact to the router: read, set, read back.

The state machine stores what the router must serve (:class:`~rolloutd.core.progress.Desired`)
and nothing else; this step brings the router to it. It reads the router; if the router serves
the fact, it is done. Otherwise, unless the fact's attempt is backing off after a failure, it
sets the weight inside the router's write deadline and the lease, and reads back once. The
attempt's count, back-off, last error and its one ``action_stuck`` alert live on one row keyed
by the fact (``weight@gen<N>=<W>``); every older fact's open row is superseded before anything
is sent, so a stale weight is never sent.

This module and the router drivers are the only callers of ``Router.set_weight``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from rolloutd import failpoints
from rolloutd.core.actions import Observed
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Desired
from rolloutd.errors import PermanentError, RolloutdError, TemporaryError
from rolloutd.reconcile.facts import Facts
from rolloutd.reconcile.perform import Attempt, Performer
from rolloutd.reconcile.shell import Shell
from rolloutd.routers import deadline
from rolloutd.routers.base import Router, RouterState
from rolloutd.store import queries

if TYPE_CHECKING:
    from rolloutd.store.types import Session

log = structlog.get_logger("rolloutd.reconcile")


class Converger:
    """Brings a rollout's router to its desired fact, for the leader."""

    def __init__(self, shell: Shell, performer: Performer) -> None:
        self.shell = shell
        self.performer = performer

    def preflight(self, plan: Plan, router: Router | None) -> tuple[Observed, str | None]:
        """Before the start, check that the router can do the job at all."""
        if router is None:
            return Observed(), f"router driver {plan.router.driver!r} is not available"
        try:
            router.check()
            state = router.read_weight()
        except PermanentError as exc:
            return Observed(), str(exc)
        return Observed(router_weight=state.weight, router_mirror=state.mirror), None

    def converge(
        self, facts: Facts, desired: Desired, router: Router | None, bound: Any
    ) -> Observed:
        """Bring the router to ``desired`` and report what it reads.

        When the router reads something else than the fact, the fact's attempt is made: for
        the first time after a crash between the decision and the attempt, again after its
        back-off, or reopened when the router lost a weight it had taken (drift, recorded as
        an event). A router that serves the fact costs one read and no write.
        """
        shell, rollout_id = self.shell, facts.rollout.id
        now = shell.clock()
        if any(a.kind == "set_weight" and a.key != desired.key for a in facts.owed):
            with shell.write(shell.held()) as session:
                supersede(shell, session, rollout_id, desired, now)
            facts.dirty = True
        state = read_router(router, bound)
        if router is None or state is None:
            return Observed(done_actions=facts.done)
        served = desired.served_by(state.weight, state.mirror)
        if served and not any(a.key == desired.key for a in facts.owed):
            return _observed(state, facts.done)
        facts.dirty = True
        with shell.write(shell.held()) as session:
            row = queries.action_by_key(session, rollout_id, desired.key)
            if served:
                if row is not None and row.status != "done":
                    # It landed before a crash, or the router already served the fact.
                    queries.finish_action(session, row.id, status="done", now=now)
                return _observed(state, facts.done)
            if row is None:
                row = enqueue_attempt(session, rollout_id, desired, now)
            elif row.status == "done":
                bound.warning("router drift", desired=desired.weight, found=state.weight)
                shell.event(
                    session,
                    rollout_id,
                    "drift",
                    f"router read {state.weight}% canary, desired {desired.weight}%; "
                    f"re-applying {desired.weight}%",
                    now=now,
                    data={"found": state.weight, "desired": desired.weight},
                )
                queries.reopen_action(session, row.id)
            attempt = Attempt.of(row)
        landed = self._set(facts, router, attempt, bound)
        return _observed(landed or state, facts.done)

    def _set(
        self, facts: Facts, router: Router, attempt: Attempt, bound: Any
    ) -> RouterState | None:
        """Set the attempt's weight and read it back once; None when it was not sent (backing
        off) or failed (the outcome is recorded on its row)."""
        weight, mirror = int(attempt.payload["weight"]), bool(attempt.payload["mirror"])
        landed: list[RouterState] = []

        def write() -> None:
            # The deadline starts before the lease is checked, so the write lands (or is
            # abandoned) while the lease is still ours, with the margin to spare.
            timeout = deadline.write_timeout(router)
            with deadline.within(timeout):
                held = self.shell.held(outlive=timeout)
                failpoints.hit("before_router_write")
                with deadline.writing_as(held.epoch):
                    router.set_weight(weight, mirror=mirror)
            state = router.read_weight()
            if state.weight != weight:
                raise TemporaryError(f"router reads {state.weight}% after setting {weight}%")
            landed.append(state)

        if not self.performer.run(facts, attempt, write, bound):
            return None
        return landed[0]


def supersede(
    shell: Shell, session: Session, rollout_id: int, desired: Desired, now: datetime
) -> None:
    """Mark every open weight attempt but ``desired``'s superseded, each with an event."""
    superseded = queries.supersede_weight_attempts(
        session, rollout_id, current=desired.key, now=now
    )
    for key in superseded:
        shell.event(
            session,
            rollout_id,
            "superseded",
            f"{key} superseded by {desired.key}: never to be sent",
            now=now,
            dedup_key=f"{key}/superseded",
            data={"key": key, "by": desired.key},
        )


def enqueue_attempt(session: Session, rollout_id: int, desired: Desired, now: datetime) -> Any:
    """The attempt row toward ``desired``, added when there is none."""
    payload = {"weight": desired.weight, "mirror": desired.mirror, "generation": desired.generation}
    queries.enqueue_actions(
        session, rollout_id=rollout_id, actions=[(desired.key, "set_weight", payload)], now=now
    )
    return queries.action_by_key(session, rollout_id, desired.key)


def read_router(router: Router | None, bound: Any) -> RouterState | None:
    """What the router serves, or None when there is no router or it cannot be read."""
    if router is None:
        return None
    try:
        return router.read_weight()
    except RolloutdError as exc:
        bound.warning("router read-back failed", error=str(exc))
        return None


def _observed(state: RouterState, done: frozenset[str]) -> Observed:
    return Observed(router_weight=state.weight, router_mirror=state.mirror, done_actions=done)
