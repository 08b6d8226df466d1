"""The tick: a batch of rollouts judged and decided in one transaction.

For each rollout of the batch: converge the router toward the stored desired fact (read it;
set and read back only when it serves something else), judge the due gates. Then, in one
fenced transaction for the whole batch: read the batch's pending commands, store every
evaluation in one statement, ask the pure state machine for each rollout's decision, and
write only what a decision changed (progress, events, command outcomes, steps, the attempt
row of a new desired fact). A baking rollout's tick decides nothing and writes nothing but
its evaluations. After the commit, the new attempts are performed and a new desired fact
takes the same road to the router. A rollout whose gate breached is decided in a transaction
of its own as soon as it is judged, and every rollout's triggers are judged before any is
observed: a trigger's rollback reaches the router as fast as in a batch of one.

The leader keeps the facts only it writes in memory between ticks (:mod:`.facts`), so a
batch of baking rollouts costs a lease fence, one read of commands and one insert: under one
round trip a rollout-tick. A crash anywhere loses nothing: the desired facts are in the
database before anything is done toward them, every attempt is keyed and idempotent
(absolute weights), and the next tick (of this process or another leader) converges toward
the facts, never toward a log of what was attempted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from rolloutd.core.actions import Observed
from rolloutd.core.machine import Decision, breaches, decide, desired_of
from rolloutd.core.progress import Progress, State
from rolloutd.drivers import Drivers
from rolloutd.errors import PermanentError, RolloutdError
from rolloutd.gates.base import Evaluation
from rolloutd.reconcile import decisions, judge, records
from rolloutd.reconcile import facts as known_facts
from rolloutd.reconcile.converge import Converger
from rolloutd.reconcile.facts import Facts, Known
from rolloutd.reconcile.perform import Attempt, Performer
from rolloutd.reconcile.shell import LEASE_MARGIN, NotLeading, Shell
from rolloutd.reconcile.suites import Suites
from rolloutd.routers import deadline
from rolloutd.routers.base import Router
from rolloutd.routers.deadline import LONGEST_WRITE_TIMEOUT
from rolloutd.store import queries
from rolloutd.store.lease import Held

if TYPE_CHECKING:
    from rolloutd.store.types import Sessions

log = structlog.get_logger("rolloutd.reconcile")

# The daemon's default lease TTL (``ROLLOUTD_LEASE_TTL_SECONDS``); the daemon passes its own.
DEFAULT_LEASE_TTL = timedelta(seconds=15)
# A rollout whose router and metrics took longer than this to observe is ticked on its own.
SLOW_SECONDS = 0.25


@dataclass(frozen=True)
class TickResult:
    """What a tick did to one rollout, for the scheduler and for tests."""

    rollout_id: int
    state: State
    decision: Decision | None
    watching: bool = False
    """The rollout ended, and its router is still read back and repaired (see
    :meth:`Reconciler.watch_window`): keep ticking it."""


@dataclass
class _Work:
    """One rollout's part of a batch, between observing and deciding."""

    facts: Facts
    router: Router | None
    bound: Any
    observed: Observed
    preflight_error: str | None
    evaluations: list[Evaluation]
    moved: bool = False
    """The decision changed the desired fact."""
    added: list[Attempt] = field(default_factory=list)
    """The attempts of the decision's other actions (alerts, redeploys, verifications)."""


def _breached(work: _Work) -> bool:
    """A gate breached, as the machine reads it: the rollout is decided in a transaction of
    its own, ahead of its batch."""
    return any(breaches(work.facts.plan, e.gate, e.verdict) for e in work.evaluations)


Outcome = TickResult | RolloutdError
"""A rollout's tick: what it did, or the error that stopped it (the others went on)."""


class Reconciler:
    """Drives rollouts, a batch of ticks at a time, on behalf of the leader."""

    def __init__(
        self,
        sessions: Sessions,
        drivers: Drivers,
        *,
        clock: Callable[[], datetime],
        lease: Callable[[], Held | None],
        instance: str,
        wall: Callable[[], datetime] | None = None,
        margin: timedelta = LEASE_MARGIN,
        lease_ttl: Callable[[], timedelta] = lambda: DEFAULT_LEASE_TTL,
    ) -> None:
        self.shell = Shell(sessions, clock, wall or clock, lease, instance, margin)
        self.lease_ttl = lease_ttl
        self.drivers = drivers
        self.performer = Performer(self.shell, drivers)
        self.converger = Converger(self.shell, self.performer)
        self.suites = Suites(self.shell)
        self.known = Known()
        self.intervals: dict[int, timedelta] = {}
        """Each rollout's tick interval (its ``trigger_interval``), once its plan was read."""
        self.slow: set[int] = set()
        """Rollouts whose last observation (router, metrics) took over :data:`SLOW_SECONDS`:
        the scheduler ticks each in a batch of its own, so it holds up no other."""
        self.local: set[int] = set()
        """Rollouts whose plan reaches nothing over the network (``Plan.waits_on_network``),
        once their plan was read: the scheduler ticks their batches in one thread."""

    def tick(self, rollout_id: int) -> TickResult:
        """Run one tick of ``rollout_id`` alone.

        :raises NotLeading: when the lease is not ours; nothing was written or performed.
        :raises RolloutdError: what stopped the tick (a TemporaryError is worth retrying).
        """
        outcome = self.tick_many([rollout_id])[rollout_id]
        if isinstance(outcome, RolloutdError):
            raise outcome
        return outcome

    def tick_many(self, rollout_ids: Sequence[int]) -> dict[int, Outcome]:
        """Run one tick of each rollout, deciding them all in one transaction.

        A rollout whose own part fails (its router, its metrics) gets its error as its
        outcome; the others go on.

        :raises NotLeading: when the lease is not ours; the batch wrote nothing (but a
            breached rollout's own transaction, if it came first).
        :raises StaleWrite: another writer moved a rollout on; likewise.
        """
        shell = self.shell
        now = shell.clock()
        held = shell.held()
        self.known.under(held.epoch)
        outcomes: dict[int, Outcome] = {}
        works: list[_Work] = []
        found = self._facts(rollout_ids)
        judgements = judge.of_batch(found, self.drivers, self.suites, now)
        # Every rollout's triggers first: a breach goes to the router before the rest of the
        # batch is observed, whatever its place in the batch.
        for judgement in judgements.values():
            if judgement.breached():
                self._take(held, judgement, outcomes, works)
        for rollout_id, facts in found.items():
            if isinstance(facts, RolloutdError):
                self.known.forget(rollout_id)
                outcomes[rollout_id] = facts
            elif rollout_id not in outcomes:
                self._take(held, judgements[rollout_id], outcomes, works)
        outcomes.update(self._decide_and_follow(held, works, now))
        return outcomes

    def _take(
        self,
        held: Held,
        judgement: judge.Judgement,
        outcomes: dict[int, Outcome],
        works: list[_Work],
    ) -> None:
        """Observe one rollout of the batch: its outcome, if it needs no decision or failed;
        decided at once, if a gate breached; else its work joins the batch's decision."""
        facts = judgement.facts
        rollout_id, started = facts.rollout.id, time.perf_counter() - judgement.spent
        try:
            work = self._observe(facts, judgement)
        except NotLeading:
            raise
        except RolloutdError as exc:
            self.known.forget(rollout_id)
            outcomes[rollout_id] = exc
            return
        finally:
            slow = time.perf_counter() - started > SLOW_SECONDS
            (self.slow.add if slow else self.slow.discard)(rollout_id)
        if isinstance(work, TickResult):
            outcomes[rollout_id] = work
            self.known.keep(facts)
        elif _breached(work):
            # Its rollback goes to the router now, not after the rest of the batch.
            outcomes.update(self._decide_and_follow(held, [work], judgement.now))
        else:
            works.append(work)

    def _decide_and_follow(
        self, held: Held, works: list[_Work], now: datetime
    ) -> dict[int, Outcome]:
        try:
            decided = self._decide(held, works, now)
        except BaseException:
            for work in works:
                self.known.forget(work.facts.rollout.id)
            raise
        return {work.facts.rollout.id: self._follow(work, decision) for work, decision in decided}

    def _facts(self, rollout_ids: Sequence[int]) -> dict[int, Facts | RolloutdError]:
        """The batch's facts: known ones from memory, the rest read in one transaction."""
        found: dict[int, Facts | RolloutdError] = {}
        missing = self.known.missing(rollout_ids)
        if missing:
            with self.shell.read() as session:
                found.update(known_facts.read_many(session, missing, self.known.plans))
        for rollout_id, read in found.items():
            if isinstance(read, Facts):
                self.intervals[rollout_id] = read.plan.trigger_interval
                if read.plan.waits_on_network:
                    self.local.discard(rollout_id)
                else:
                    self.local.add(rollout_id)
        return {i: found[i] if i in found else self.known.facts[i] for i in rollout_ids}

    def _observe(self, facts: Facts, judgement: judge.Judgement) -> _Work | TickResult:
        """Everything before the decision: owed attempts, the router, the gates (the triggers
        may have been judged already)."""
        rollout_id, plan, progress, now = (
            facts.rollout.id,
            facts.plan,
            facts.progress,
            judgement.now,
        )
        bound = log.bind(rollout=rollout_id, instance=self.shell.instance)
        router = self._router(rollout_id, plan)
        # Replay what is owed besides weights (alerts, redeploys, verifications): an ended
        # rollout may still owe its final alert after a crash. Weights converge below.
        self.performer.owed(facts, [a for a in facts.owed if a.kind != "set_weight"], bound)
        if progress.ended is not None:
            # A newer rollout of the service owns the router now: never fight it.
            watching = not facts.succeeded and self._watching(progress, router, now)
            if watching:
                # An ex-leader's late router write may still land: keep the final fact served.
                self.converger.converge(facts, desired_of(plan, progress), router, bound)
            return TickResult(rollout_id, State(progress.ended), None, watching)
        if progress.started_at is None:
            observed, preflight_error = self.converger.preflight(plan, router)
        else:
            observed = self.converger.converge(facts, desired_of(plan, progress), router, bound)
            preflight_error = None
        evaluations = judgement.evaluations()
        return _Work(facts, router, bound, observed, preflight_error, evaluations)

    def watch_window(self, router: Router | None) -> timedelta:
        """How long an ended rollout keeps its router verified: twice the lease TTL (the
        lease an ex-leader held, and the takeover) plus the longest router write timeout,
        past which no write an ex-leader started under its lease can still land."""
        longest = max(LONGEST_WRITE_TIMEOUT, deadline.write_timeout(router))
        return 2 * self.lease_ttl() + longest

    def _watching(self, progress: Progress, router: Router | None, now: datetime) -> bool:
        if router is None or progress.started_at is None or progress.ended_at is None:
            return False
        return now - progress.ended_at <= self.watch_window(router)

    def _router(self, rollout_id: int, plan: Any) -> Router | None:
        try:
            return self.drivers.router(rollout_id, plan)
        except PermanentError as exc:
            log.error("router unavailable", rollout=rollout_id, error=str(exc))
            return None

    def forget(self, rollout_id: int | None = None) -> None:
        """Let go of what is kept of ``rollout_id`` (it ended), or of every rollout (this
        process stopped leading)."""
        self.known.forget(rollout_id)
        if rollout_id is None:
            self.intervals.clear()
            self.local.clear()
        else:
            self.intervals.pop(rollout_id, None)
            self.local.discard(rollout_id)

    def close(self) -> None:
        """Nothing to release: the evaluation runs the tick creates are
        :class:`~rolloutd.reconcile.runs.EvaluationRuns`'."""

    # -- deciding and writing ---------------------------------------------------------------

    def _decide(
        self, held: Held, works: list[_Work], now: datetime
    ) -> list[tuple[_Work, Decision]]:
        """Store the batch's evaluations, decide each rollout, and write what changed, in
        one transaction fenced by the lease."""
        if not works:
            return []
        decided: list[tuple[_Work, Decision]] = []
        with self.shell.write(held) as session:
            ids = [w.facts.rollout.id for w in works]
            commands = queries.pending_commands_of(session, ids)
            queries.record_evaluations(
                session,
                [row for w in works for row in records.evaluation_rows(w.facts, w.evaluations)],
            )
            for work in works:
                facts = work.facts
                handled = commands.get(facts.rollout.id, [])
                facts.newest = facts.newest.with_fresh(work.evaluations)
                decision = decide(
                    facts.plan,
                    facts.progress,
                    verdicts=facts.newest.verdicts(facts.plan, facts.progress),
                    commands=[records.command_of(c) for c in handled],
                    observed=work.observed,
                    now=now,
                    preflight_error=work.preflight_error,
                )
                if not decisions.quiet(facts, decision, handled):
                    work.moved, work.added = decisions.write(
                        self.shell, session, held, facts, decision, handled, now
                    )
                elif facts.rollout.id not in self.known.claimed:
                    decisions.claim(self.shell, session, held, facts, decision, now)
                if records.record_steps(session, facts, decision.progress, now):
                    facts.dirty = True
                facts.progress = decision.progress
                decided.append((work, decision))
        self.known.claimed.update(w.facts.rollout.id for w in works)
        return decided

    def _follow(self, work: _Work, decision: Decision) -> TickResult:
        """After the commit: perform the decision's attempts, take a new desired fact to the
        router, and keep the facts for the next tick."""
        facts = work.facts
        self.performer.owed(facts, work.added, work.bound)
        if work.moved and decision.progress.desired is not None:
            self.converger.converge(facts, decision.progress.desired, work.router, work.bound)
        if decision.events:
            kinds = [e.kind for e in decision.events]
            work.bound.info("tick", state=decision.state.value, events=kinds)
        self.known.keep(facts)
        return TickResult(facts.rollout.id, decision.state, decision)
