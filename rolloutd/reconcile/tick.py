"""One tick of one rollout: the imperative shell around the pure state machine.

Load the rollout → converge the world toward the stored desired facts (supersede stale
weight attempts, perform what is owed, read the router back, repair drift toward the
*desired* weight) → evaluate due gates → decide → write progress (with the new desired
facts), evaluations, events and the new attempts in one fenced transaction, superseding
every older weight attempt → perform the attempts.

A crash anywhere loses nothing: the desired facts are in the database before anything is
done toward them, every attempt is keyed and idempotent (absolute weights), and the next
tick (of this process or another leader) converges toward the facts, never toward a log
of what was attempted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.orm import Session, sessionmaker

from rolloutd.analysis.base import Evaluation, Judging, MetricsSource, Pool, Role
from rolloutd.analysis.budget import Budgeted
from rolloutd.analysis.gates import evaluate_gate
from rolloutd.analysis.windows import bake_over, earlier_windows, final_window
from rolloutd.core.actions import Observed, Verdict
from rolloutd.core.machine import Decision, decide, desired_of
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.core.progress import Desired, Progress, State
from rolloutd.drivers import Drivers
from rolloutd.errors import PermanentError, RolloutdError
from rolloutd.evaluation.source import SuiteCounts, SuiteFedSource
from rolloutd.operations import plan_of
from rolloutd.reconcile import records
from rolloutd.reconcile.perform import Attempt, Performer
from rolloutd.reconcile.shell import LEASE_MARGIN, Shell
from rolloutd.reconcile.suites import Suites, suite_counts
from rolloutd.routers import deadline
from rolloutd.routers.base import Router, RouterState
from rolloutd.routers.deadline import LONGEST_WRITE_TIMEOUT
from rolloutd.store import queries
from rolloutd.store.lease import Held, fence
from rolloutd.store.models import Rollout

log = structlog.get_logger("rolloutd.reconcile")

# The daemon's default lease TTL (``ROLLOUTD_LEASE_TTL_SECONDS``); the daemon passes its own.
DEFAULT_LEASE_TTL = timedelta(seconds=15)


@dataclass(frozen=True)
class TickResult:
    """What a tick did, for the scheduler and for tests."""

    rollout_id: int
    state: State
    performed: int
    decision: Decision | None
    watching: bool = False
    """The rollout ended, and its router is still read back and repaired (see
    :meth:`Reconciler.watch_window`): keep ticking it."""


@dataclass
class Facts:
    """What one tick read of a rollout, in one transaction at its start."""

    rollout: Rollout
    plan: Plan
    progress: Progress
    owed: list[Attempt]
    """The rollout's open attempts."""
    done: frozenset[str]
    """The keys of its performed attempts (read again after the tick performed one)."""
    succeeded: bool
    """It ended and a newer rollout of its service and environment exists."""
    steps: dict[int, Any]
    """Its step rows by index (none once it ended)."""
    newest: records.Newest
    suite_counts: dict[Pool, SuiteCounts] = field(default_factory=dict)
    """The newest suite run's schema counts of each pool in the step (for the schema gates)."""


class Reconciler:
    """Drives rollouts one tick at a time on behalf of the leader."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
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
        self.suites = Suites(self.shell)

    # -- the tick ---------------------------------------------------------------------------

    def tick(self, rollout_id: int) -> TickResult:
        """Run one tick of ``rollout_id``.

        :raises NotLeading: when the lease is not ours; nothing was written or performed.
        :raises TemporaryError: for a failure worth retrying on the next tick.
        """
        shell = self.shell
        bound = log.bind(rollout=rollout_id, instance=shell.instance)
        now = shell.clock()
        held = shell.held()
        facts = self._read(rollout_id)
        plan, progress = facts.plan, facts.progress
        router = self._router(rollout_id, plan)
        # Replay what is owed besides weights (alerts, redeploys, verifications): an ended
        # rollout may still owe its final alert after a crash. Weights converge below.
        performed = self._perform(rollout_id, plan, router, facts.owed, None, bound)
        if performed:
            with shell.read() as session:
                facts.done = queries.done_action_keys(session, rollout_id)
        if progress.ended is not None:
            # A newer rollout of the service owns the router now: never fight it.
            watching = not facts.succeeded and self._watching(progress, router, now)
            if watching:
                # An ex-leader's late router write may still land: keep the final fact served.
                self._converge(facts, desired_of(plan, progress), router, bound)
            return TickResult(rollout_id, State(progress.ended), performed, None, watching)
        if progress.started_at is None:
            observed, preflight_error = self._preflight(plan, router)
        else:
            observed = self._converge(facts, desired_of(plan, progress), router, bound)
            preflight_error = None
        evaluations = self._evaluate(facts, now)
        decision, attempts = self._decide(facts, held, now, evaluations, observed, preflight_error)
        performed += self._perform(
            rollout_id, plan, router, attempts, decision.progress.desired, bound
        )
        if decision.events:
            bound.info("tick", state=decision.state.value, events=[e.kind for e in decision.events])
        return TickResult(rollout_id, decision.state, performed, decision)

    def _read(self, rollout_id: int) -> Facts:
        """Everything the tick needs from the store, in one transaction."""
        with self.shell.read() as session:
            rollout = queries.get_rollout(session, rollout_id)
            plan = plan_of(rollout)
            progress = Progress.from_storage(rollout.progress)
            ended = progress.ended is not None
            judging = progress.started_at is not None and progress.rollback is None
            return Facts(
                rollout=rollout,
                plan=plan,
                progress=progress,
                owed=[Attempt.of(a) for a in queries.open_actions(session, rollout_id)],
                done=queries.done_action_keys(session, rollout_id),
                succeeded=ended and queries.has_successor(session, rollout),
                steps={row.step_index: row for row in queries.list_steps(session, rollout_id)}
                if not ended
                else {},
                newest=records.newest_stored(session, rollout_id, plan, progress)
                if not ended and judging
                else records.Newest(),
                suite_counts=suite_counts(session, rollout_id, plan, progress)
                if not ended and judging
                else {},
            )

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

    def _router(self, rollout_id: int, plan: Plan) -> Router | None:
        try:
            return self.drivers.router(rollout_id, plan)
        except PermanentError as exc:
            log.error("router unavailable", rollout=rollout_id, error=str(exc))
            return None

    def _perform(
        self,
        rollout_id: int,
        plan: Plan,
        router: Router | None,
        owed: list[Attempt],
        desired: Desired | None,
        bound: Any,
    ) -> int:
        """Perform the owed attempts; a weight attempt only if it is ``desired``'s (None:
        no weight, the convergence step makes the attempt after reading the router)."""
        done = 0
        for action in owed:
            if action.kind == "set_weight":
                if desired is not None and action.key == desired.key:
                    done += self.performer.attempt(rollout_id, plan, router, action, bound)
                continue
            done += self.performer.attempt(rollout_id, plan, router, action, bound)
        return done

    # -- observing and converging -----------------------------------------------------------

    def _preflight(self, plan: Plan, router: Router | None) -> tuple[Observed, str | None]:
        """Before the start, check that the router can do the job at all."""
        if router is None:
            return Observed(), f"router driver {plan.router.driver!r} is not available"
        try:
            router.check()
            state = router.read_weight()
        except PermanentError as exc:
            return Observed(), str(exc)
        return Observed(router_weight=state.weight, router_mirror=state.mirror), None

    def _converge(
        self, facts: Facts, desired: Desired, router: Router | None, bound: Any
    ) -> Observed:
        """Bring the router to the desired fact and report what it reads.

        Stale weight attempts are superseded first, so nothing older than the current
        generation can be sent. When the router reads something else than the fact, the
        fact's attempt is (re)made: made for the first time after a crash between the
        decision and the attempt (or for progress that predates the facts), retried after
        its backoff, or reopened when the router lost a weight it had taken (drift,
        recorded as an event). A router that serves the fact its done attempt made costs no
        write at all.
        """
        shell = self.shell
        rollout_id, plan = facts.rollout.id, facts.plan
        held = shell.held()
        now = shell.clock()
        stale = [a for a in facts.owed if a.kind == "set_weight" and a.key != desired.key]
        if stale:
            with shell.write(held) as session:
                self._supersede(session, rollout_id, desired, now)
        done = facts.done
        state = self._read_router(router, bound)
        if router is None or state is None:
            return Observed(done_actions=done)
        served = desired.served_by(state.weight, state.mirror)
        open_now = any(a.key == desired.key for a in facts.owed)
        if served and not open_now:
            return _observed(state, done)
        with shell.write(held) as session:
            row = queries.action_by_key(session, rollout_id, desired.key)
            if served:
                if row is not None and row.status != "done":
                    # It landed before a crash, or the router already served the fact.
                    queries.finish_action(session, row.id, status="done", now=now)
                return _observed(state, done)
            if row is None:
                row = _enqueue_attempt(session, rollout_id, desired, now)
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
        if self.performer.attempt(rollout_id, plan, router, attempt, bound):
            state = self._read_router(router, bound) or state
        return _observed(state, done)

    def _supersede(
        self, session: Session, rollout_id: int, desired: Desired, now: datetime
    ) -> None:
        """Mark every open weight attempt but the current fact's superseded, with an event."""
        for key in queries.supersede_weight_attempts(
            session, rollout_id, current=desired.key, now=now
        ):
            self.shell.event(
                session,
                rollout_id,
                "superseded",
                f"{key} superseded by {desired.key}: never to be sent",
                now=now,
                dedup_key=f"{key}/superseded",
                data={"key": key, "by": desired.key},
            )

    def _read_router(self, router: Router | None, bound: Any) -> RouterState | None:
        if router is None:
            return None
        try:
            return router.read_weight()
        except RolloutdError as exc:
            bound.warning("router read-back failed", error=str(exc))
            return None

    # -- gates ------------------------------------------------------------------------------

    def _evaluate(self, facts: Facts, now: datetime) -> list[Evaluation]:
        """Judge the rollback triggers every tick, and the step's gates when they are due."""
        rollout_id, plan, progress = facts.rollout.id, facts.plan, facts.progress
        if progress.started_at is None or progress.rollback is not None:
            return []
        at_step = facts.newest.at_step
        verified = {index: row.verified_at for index, row in facts.steps.items()}
        completed = {index: row.completed_at for index, row in facts.steps.items()}
        due: list[tuple[str, Role]] = [(g, "trigger") for g in plan.rollback.triggers]
        for gate in plan.gates_of(progress.step_index):
            last = at_step.get(gate)
            if gate not in plan.rollback.triggers and (
                last is None or now - last.evaluated_at >= plan.interval
            ):
                due.append((gate, "step"))
        if not due:
            return []
        suites = [(g, r) for g, r in due if isinstance(plan.gates[g], SuiteGate)]
        due = [(g, r) for g, r in due if not isinstance(plan.gates[g], SuiteGate)]
        judged = [self.suites.judge(rollout_id, plan, progress, g, r, now) for g, r in suites]
        if not due:
            return judged
        try:
            source: MetricsSource | None = self.drivers.metrics(rollout_id, plan)
        except PermanentError as exc:
            reason = str(exc)
            source = None
        if source is None:
            failed = [Evaluation(g, r, Verdict.INCONCLUSIVE, now, reason=reason) for g, r in due]
            return judged + failed
        source = Budgeted(SuiteFedSource(source, facts.suite_counts), plan.trigger_interval)
        weight = plan.step_weight(progress.step_index)
        return judged + [
            evaluate_gate(
                plan.gates[gate],
                Judging(
                    gate,
                    role,
                    source,
                    now,
                    plan,
                    progress.step_verified_at,
                    weight=weight,
                    idle=plan.idle_pool(progress.step_index),
                    # None but at the last step carrying the gate, in either role.
                    final=final_window(plan, gate, progress, verified, now),
                    bake_over=bake_over(plan, progress, now),
                    earlier=earlier_windows(plan, gate, role, progress, verified, completed),
                ),
            )
            for gate, role in due
        ]

    def close(self) -> None:
        """Nothing to release: the tick keeps nothing open between ticks (the evaluation runs
        it creates are :class:`~rolloutd.reconcile.runs.EvaluationRuns`')."""

    # -- deciding and writing ---------------------------------------------------------------

    def _decide(
        self,
        facts: Facts,
        held: Held,
        now: datetime,
        evaluations: list[Evaluation],
        observed: Observed,
        preflight_error: str | None,
    ) -> tuple[Decision, list[Attempt]]:
        shell = self.shell
        rollout, plan, progress = facts.rollout, facts.plan, facts.progress
        rollout_id = rollout.id
        with shell.write(held) as session:
            records.record_evaluations(session, rollout_id, plan, progress.step_index, evaluations)
            commands = queries.pending_commands(session, rollout_id)
            decision = decide(
                plan,
                progress,
                verdicts=facts.newest.with_fresh(evaluations).verdicts(plan, progress),
                commands=[records.command_of(c) for c in commands],
                observed=observed,
                now=now,
                preflight_error=preflight_error,
            )
            # What the decision did is stamped no earlier than the commands it handled: a
            # command that arrived while the tick ran is handled after it was made.
            stamp = max([shell.clock(), now, *(c.created_at for c in commands)])
            revision = rollout.revision
            queries.save_progress(
                session,
                rollout,
                progress=decision.progress.for_storage(),
                state=decision.state.value,
                active=not decision.state.terminal,
                now=stamp,
                fence=fence(held, now=shell.wall()),
            )
            for i, event in enumerate(decision.events):
                queries.append_event(
                    session,
                    rollout_id=rollout_id,
                    kind=event.kind,
                    actor=event.actor if event.actor != "rolloutd" else shell.actor,
                    detail=event.detail,
                    data=event.data,
                    now=stamp,
                    dedup_key=f"rev-{revision}/{i}",
                )
            for outcome in decision.outcomes:
                queries.finish_command(
                    session,
                    outcome.command_id,
                    status="applied" if outcome.applied else "rejected",
                    outcome=outcome.detail,
                    now=stamp,
                )
            desired = decision.progress.desired
            if desired is not None and desired != progress.desired:
                self._supersede(session, rollout_id, desired, stamp)
            added = queries.enqueue_actions(
                session,
                rollout_id=rollout_id,
                actions=[(a.key, a.kind, a.payload()) for a in decision.actions],
                now=stamp,
            )
            records.record_steps(
                session, rollout, plan, progress, decision.progress, now, known=facts.steps
            )
            return decision, [Attempt.of(a) for a in added]


def _observed(state: RouterState, done: frozenset[str]) -> Observed:
    return Observed(router_weight=state.weight, router_mirror=state.mirror, done_actions=done)


def _enqueue_attempt(session: Session, rollout_id: int, desired: Desired, now: datetime) -> Any:
    """The attempt row toward ``desired``, added when there is none."""
    queries.enqueue_actions(
        session,
        rollout_id=rollout_id,
        actions=[
            (
                desired.key,
                "set_weight",
                {
                    "weight": desired.weight,
                    "mirror": desired.mirror,
                    "generation": desired.generation,
                },
            )
        ],
        now=now,
    )
    return queries.action_by_key(session, rollout_id, desired.key)
