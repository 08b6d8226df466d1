"""One tick of one rollout: the imperative shell around the pure state machine.

Load the rollout → replay the intent log → read the router back (and repair drift) →
evaluate due gates → decide → write progress, evaluations, events and new actions as
*pending* in one fenced transaction → perform the actions → mark them *done*.

A crash anywhere loses nothing: what was decided is in the database before any of it is
done, every action is keyed and idempotent (absolute weights), and the next tick (of this
process or another leader) performs whatever is still pending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

import structlog
from sqlalchemy.orm import Session, sessionmaker

from rolloutd.actions import Command, GateResult, Observed, Verdict
from rolloutd.alerts.enqueue import enqueue_rollout_alert
from rolloutd.analysis.base import Evaluation, FinalWindow, Judging, MetricsSource, Role
from rolloutd.analysis.gates import evaluate_gate
from rolloutd.drivers import Drivers
from rolloutd.errors import NotFound, PermanentError, RolloutdError, TemporaryError
from rolloutd.machine import Decision, decide
from rolloutd.operations import plan_of
from rolloutd.plan import Plan, SuiteGate
from rolloutd.progress import Progress, State
from rolloutd.routers.base import Router, RouterState
from rolloutd.store import queries
from rolloutd.store.db import transaction
from rolloutd.store.errors import StaleWrite
from rolloutd.store.lease import Held, fence, hold_for_write
from rolloutd.store.models import Action, Rollout

log = structlog.get_logger("rolloutd.reconcile")

# An action is alerted as stuck after this many failed attempts (it keeps being retried).
STUCK_AFTER_ATTEMPTS = 3
RETRY_BASE = timedelta(seconds=2)
RETRY_MAX = timedelta(minutes=5)
# Writes and side effects need the lease to outlive them by this much (at most; the daemon
# uses a quarter of a shorter lease).
LEASE_MARGIN = timedelta(seconds=2)


class NotLeading(TemporaryError):
    """This process does not (or no longer) hold the lease; it must not act."""


@dataclass(frozen=True)
class TickResult:
    """What a tick did, for the scheduler and for tests."""

    rollout_id: int
    state: State
    performed: int
    decision: Decision | None


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
    ) -> None:
        self.sessions = sessions
        self.drivers = drivers
        self.clock = clock
        # Leases live on the wall clock even when rollout time is scaled (the demo) or faked.
        self.wall = wall or clock
        self.margin = margin
        self.lease = lease
        self.instance = instance
        self.actor = f"rolloutd@{instance}"
        self._suite_executor: ThreadPoolExecutor | None = None
        self._suite_runs: dict[tuple[int, str], Future[None]] = {}

    # -- the tick ---------------------------------------------------------------------------

    def tick(self, rollout_id: int) -> TickResult:
        """Run one tick of ``rollout_id``.

        :raises NotLeading: when the lease is not ours; nothing was written or performed.
        :raises TemporaryError: for a failure worth retrying on the next tick.
        """
        bound = log.bind(rollout=rollout_id, instance=self.instance)
        now = self.clock()
        held = self._held()
        with self._read() as session:
            rollout = queries.get_rollout(session, rollout_id)
            plan = plan_of(rollout)
            progress = Progress.from_storage(rollout.progress)
            pending = [_Pending.of(a) for a in queries.pending_actions(session, rollout_id)]
        router = self._router(rollout_id, plan)
        # Replay first: an ended rollout may still owe its final alert after a crash.
        performed = self._perform_all(rollout_id, plan, router, pending, bound)
        if progress.ended is not None:
            return TickResult(rollout_id, State(progress.ended), performed, None)
        observed_state, preflight_error = self._observe(rollout_id, plan, progress, router, bound)
        evaluations = self._evaluate(rollout_id, plan, progress, now)
        decision, new_actions = self._decide(
            rollout_id, plan, held, now, evaluations, observed_state, preflight_error
        )
        performed += self._perform_all(rollout_id, plan, router, new_actions, bound)
        if decision.events:
            bound.info("tick", state=decision.state.value, events=[e.kind for e in decision.events])
        return TickResult(rollout_id, decision.state, performed, decision)

    def _held(self) -> Held:
        held = self.lease()
        if held is None or not held.valid_at(self.wall(), margin=self.margin):
            raise NotLeading("this rolloutd does not hold the leader lease")
        return held

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with transaction(self.sessions) as session:
            yield session

    @contextmanager
    def _write(self, held: Held) -> Iterator[Session]:
        """A transaction that commits only while ``held`` is provably still the leader lease."""
        with transaction(self.sessions) as session:
            if not hold_for_write(session, held, now=self.wall() + self.margin):
                raise NotLeading("the leader lease was lost; writing nothing")
            yield session

    def _router(self, rollout_id: int, plan: Plan) -> Router | None:
        try:
            return self.drivers.router(rollout_id, plan)
        except PermanentError as exc:
            log.error("router unavailable", rollout=rollout_id, error=str(exc))
            return None

    # -- observing the world ----------------------------------------------------------------

    def _observe(
        self,
        rollout_id: int,
        plan: Plan,
        progress: Progress,
        router: Router | None,
        bound: Any,
    ) -> tuple[RouterState | None, str | None]:
        """Read the router back; before the start, check it can do the job at all."""
        if router is None:
            return None, f"router driver {plan.router.driver!r} is not available"
        if progress.started_at is None:
            try:
                router.check()
                return router.read_weight(), None
            except PermanentError as exc:
                return None, str(exc)
        try:
            state = router.read_weight()
        except RolloutdError as exc:
            bound.warning("router read-back failed", error=str(exc))
            return None, None
        return self._repair_drift(rollout_id, router, state, bound), None

    def _repair_drift(
        self, rollout_id: int, router: Router, state: RouterState, bound: Any
    ) -> RouterState:
        """Re-apply the recorded weight when the load balancer no longer does what we did."""
        now = self.clock()
        held = self._held()
        with self._read() as session:
            if queries.pending_actions(session, rollout_id):
                return state  # a change is in flight; the replay will converge
            last = queries.last_done(session, rollout_id, "set_weight")
        if last is None:
            return state
        recorded = RouterState(int(last.payload["weight"]), bool(last.payload.get("mirror")))
        if recorded == state:
            return state
        bound.warning("router drift", recorded=recorded.weight, found=state.weight)
        self._held()  # once more: a leader frozen since the check must not touch the router
        try:
            router.set_weight(recorded.weight, mirror=recorded.mirror)
            repaired = router.read_weight()
        except RolloutdError as exc:
            bound.error("drift repair failed", error=str(exc))
            return state
        with self._write(held) as session:
            queries.append_event(
                session,
                rollout_id=rollout_id,
                kind="drift",
                actor=self.actor,
                detail=f"router read {state.weight}% canary, recorded {recorded.weight}%; "
                f"re-applied {recorded.weight}%",
                data={"found": state.weight, "recorded": recorded.weight},
                now=now,
            )
        return repaired

    # -- gates ------------------------------------------------------------------------------

    def _evaluate(
        self, rollout_id: int, plan: Plan, progress: Progress, now: datetime
    ) -> list[Evaluation]:
        """Judge the rollback triggers every tick, and the step's gates when they are due."""
        if progress.started_at is None or progress.rollback is not None:
            return []
        with self._read() as session:
            at_step = queries.latest_evaluations(
                session, rollout_id, step_index=progress.step_index
            )
            rows = queries.list_steps(session, rollout_id)
            verified = {row.step_index: row.verified_at for row in rows}
            completed = {row.step_index: row.completed_at for row in rows}
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
        judged = [self._suite(rollout_id, plan, progress, g, r, now) for g, r in suites]
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
        source = self._with_suite_counts(source, rollout_id, progress)
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
                    final=_final_window(plan, gate, progress, verified, now)
                    if role == "step"
                    else None,
                    earlier=_earlier_windows(plan, gate, role, progress, verified, completed),
                ),
            )
            for gate, role in due
        ]

    # -- the tool-argument suite ------------------------------------------------------------

    def _suite(
        self, rollout_id: int, plan: Plan, progress: Progress, gate: str, role: Role, now: datetime
    ) -> Evaluation:
        """Judge a suite gate on its stored runs; start a run in the background when one is
        due (at the step's entry, then every ``every``). A run takes minutes against a real
        engine, so the tick never waits for it: the tick after it finishes judges it."""
        from rolloutd.evaluation import records
        from rolloutd.evaluation.gate import suite_due
        from rolloutd.evaluation.schedule import judge_stored

        spec = plan.gates[gate]
        assert isinstance(spec, SuiteGate)
        step = progress.step_index
        with self._read() as session:
            ran_at = records.last_run_at(session, rollout_id=rollout_id, gate=gate, step_index=step)
            evaluation = judge_stored(
                session, spec=spec, name=gate, role=role, rollout_id=rollout_id, now=now
            )
        running = self._suite_runs.get((rollout_id, gate))
        if running is not None and running.done():
            del self._suite_runs[(rollout_id, gate)]
            running = None
        if running is None and suite_due(
            spec, last_run_at=ran_at, step_entered_at=progress.step_entered_at, now=now
        ):
            self._suite_runs[(rollout_id, gate)] = self._suite_pool().submit(
                self._run_suite, rollout_id, plan, spec, gate, role, step, now
            )
            running = self._suite_runs[(rollout_id, gate)]
        if ran_at is None and spec.at_entry:
            # Judge this step on this step's run, not an earlier step's.
            reason = "the suite is running" if running is not None else "the suite has not run"
            return replace(
                evaluation,
                verdict=Verdict.PENDING,
                reason=f"{reason} in this step yet",
                evaluated_at=now,
            )
        return evaluation

    def _run_suite(
        self,
        rollout_id: int,
        plan: Plan,
        spec: SuiteGate,
        gate: str,
        role: Role,
        step: int,
        now: datetime,
    ) -> None:
        from rolloutd.evaluation.runner import RunnerOptions
        from rolloutd.evaluation.schedule import run_suite_for_gate

        # The simulated fleet reads the expected call to know which answer to perturb.
        simulated = plan.metrics.source == "simulator"
        options = RunnerOptions(concurrency=spec.concurrency, send_expected=simulated)
        try:
            result = run_suite_for_gate(
                self.sessions,
                plan=plan,
                spec=spec,
                name=gate,
                role=role,
                rollout_id=rollout_id,
                step_index=step,
                now=now,
                options=options,
            )
            log.info("suite run", rollout=rollout_id, gate=gate, verdict=result.verdict.value)
        except Exception as exc:  # a background thread: report, never die silently
            log.error("suite run failed", rollout=rollout_id, gate=gate, error=str(exc))

    def _suite_pool(self) -> ThreadPoolExecutor:
        if self._suite_executor is None:
            self._suite_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="suite")
        return self._suite_executor

    def close(self) -> None:
        """Stop starting suite runs; runs in flight are abandoned (their rows stay unwritten)."""
        if self._suite_executor is not None:
            self._suite_executor.shutdown(wait=False, cancel_futures=True)
            self._suite_executor = None

    def _with_suite_counts(
        self, source: MetricsSource, rollout_id: int, progress: Progress
    ) -> MetricsSource:
        """The schema signals count the suite's tool calls beside the live ones."""
        from rolloutd.evaluation import records
        from rolloutd.evaluation.source import SuiteFedSource

        since = progress.step_entered_at

        def counts(pool: str) -> tuple[int, int, int | None]:
            role: Literal["canary", "baseline"] = "canary" if pool == "canary" else "baseline"
            with self._read() as session:
                return records.schema_counts(session, rollout_id=rollout_id, role=role, since=since)

        return SuiteFedSource(source, counts)

    # -- deciding and writing ---------------------------------------------------------------

    def _decide(
        self,
        rollout_id: int,
        plan: Plan,
        held: Held,
        now: datetime,
        evaluations: list[Evaluation],
        router_state: RouterState | None,
        preflight_error: str | None,
    ) -> tuple[Decision, list[_Pending]]:
        with self._write(held) as session:
            rollout = queries.get_rollout(session, rollout_id)
            progress = Progress.from_storage(rollout.progress)
            for evaluation in evaluations:
                _record(session, rollout_id, progress.step_index, evaluation)
            commands = queries.pending_commands(session, rollout_id)
            decision = decide(
                plan,
                progress,
                verdicts=_verdicts(session, rollout_id, plan, progress),
                commands=[_command(c) for c in commands],
                observed=Observed(
                    router_weight=router_state.weight if router_state else None,
                    done_actions=queries.done_action_keys(session, rollout_id),
                ),
                now=now,
                preflight_error=preflight_error,
            )
            revision = rollout.revision
            queries.save_progress(
                session,
                rollout,
                progress=decision.progress.for_storage(),
                state=decision.state.value,
                active=not decision.state.terminal,
                now=now,
                fence=fence(held, now=self.wall()),
            )
            for i, event in enumerate(decision.events):
                queries.append_event(
                    session,
                    rollout_id=rollout_id,
                    kind=event.kind,
                    actor=event.actor if event.actor != "rolloutd" else self.actor,
                    detail=event.detail,
                    data=event.data,
                    now=now,
                    dedup_key=f"rev-{revision}/{i}",
                )
            for outcome in decision.outcomes:
                queries.finish_command(
                    session,
                    outcome.command_id,
                    status="applied" if outcome.applied else "rejected",
                    outcome=outcome.detail,
                    now=now,
                )
            added = queries.enqueue_actions(
                session,
                rollout_id=rollout_id,
                actions=[(a.key, a.kind, a.payload()) for a in decision.actions],
                now=now,
            )
            _record_steps(session, rollout, plan, progress, decision.progress, now)
            return decision, [_Pending.of(a) for a in added]

    # -- performing actions -----------------------------------------------------------------

    def _perform_all(
        self,
        rollout_id: int,
        plan: Plan,
        router: Router | None,
        actions: list[_Pending],
        bound: Any,
    ) -> int:
        done = 0
        for action in actions:
            if action.retry_at is not None and self.wall() < action.retry_at:
                continue  # backing off after a failure
            now = self.clock()
            held = self._held()
            try:
                if action.kind in ("deploy", "verify"):
                    self._deploy(rollout_id, plan, action, held, now)
                else:
                    self._perform(rollout_id, router, action, now)
            except (RolloutdError, ValueError) as exc:
                self._failed(rollout_id, action, held, now, str(exc), bound)
                continue
            with self._write(held) as session:
                if action.kind == "alert":
                    self._alert(session, rollout_id, action)
                queries.finish_action(session, action.id, status="done", now=self.clock())
            done += 1
        return done

    def _perform(
        self, rollout_id: int, router: Router | None, action: _Pending, now: datetime
    ) -> None:
        if action.kind == "set_weight":
            if router is None:
                raise PermanentError("no router to set the weight on")
            router.set_weight(int(action.payload["weight"]), mirror=bool(action.payload["mirror"]))
            state = router.read_weight()
            if state.weight != action.payload["weight"]:
                raise TemporaryError(
                    f"router reads {state.weight}% after setting {action.payload['weight']}%"
                )
        elif action.kind == "alert":
            pass  # an alert is written to the outbox in the transaction that marks it done
        else:
            raise PermanentError(f"unknown action kind {action.kind!r}")

    def _deploy(
        self, rollout_id: int, plan: Plan, action: _Pending, held: Held, now: datetime
    ) -> None:
        """Redeploy a pinned set on a replica, or verify that it runs there (health and
        digests), recording what happened; a failure raises and is retried with backoff."""
        from rolloutd.deploy.catalog import get_set
        from rolloutd.deploy.drills import record_deploy
        from rolloutd.deploy.executors import build_executor

        name, set_name = str(action.payload["replica"]), str(action.payload["artefacts"])
        replicas = {r.name: r for r in (*plan.pools.canary.replicas, *plan.pools.stable.replicas)}
        if name not in replicas:
            raise PermanentError(f"the plan has no replica {name!r}")
        with self._read() as session:
            try:
                pinned = get_set(session, set_name)
            except NotFound as exc:
                raise TemporaryError(str(exc)) from None
        executor = build_executor(plan)
        if action.kind == "deploy":
            result = executor.deploy(replicas[name], pinned)
            with self._write(held) as session:
                record_deploy(session, result, step="rollback", rollout_id=rollout_id, now=now)
                if result.ok:
                    what = "redeployed" if result.changed else "already runs"
                    detail = f"{name} {what} the pinned set {set_name} ({pinned.digest[:12]})"
                    self._event(session, rollout_id, "artefacts_deployed", detail, action, now)
            if not result.ok:
                raise TemporaryError(f"deploying {set_name} on {name} failed: {result.reason}")
            return
        verification = executor.verify(replicas[name], pinned)
        if not verification.ok:
            raise TemporaryError(f"{name} is not verified on {set_name}: {verification.reason}")
        with self._write(held) as session:
            detail = (
                f"{name} is healthy and serves the pinned set {set_name} ({pinned.digest[:12]})"
            )
            self._event(session, rollout_id, "replica_verified", detail, action, now)

    def _event(
        self,
        session: Session,
        rollout_id: int,
        kind: str,
        detail: str,
        action: _Pending,
        now: datetime,
    ) -> None:
        queries.append_event(
            session,
            rollout_id=rollout_id,
            kind=kind,
            actor=self.actor,
            detail=detail,
            now=now,
            dedup_key=f"{action.key}/{kind}",
            data=dict(action.payload),
        )

    def _alert(self, session: Session, rollout_id: int, action: _Pending) -> None:
        """Queue the alert's Slack messages in ``session``, which also marks the action done.

        One transaction: a crash leaves either both (the sender delivers) or neither (the
        replay queues them again, under the same keys). Outbox times are wall-clock times:
        the sender paces and retries in real seconds even when rollout time is scaled.
        """
        payload = dict(action.payload)
        topic, severity, text = payload.pop("topic"), payload.pop("severity"), payload.pop("text")
        queued = enqueue_rollout_alert(
            session,
            queries.get_rollout(session, rollout_id),
            key=action.key,
            topic=str(topic),
            severity=str(severity),
            text=str(text),
            data=payload,
            now=self.wall(),
        )
        level = {"critical": "error", "warning": "warning"}.get(str(severity), "info")
        getattr(log, level)("alert", rollout=rollout_id, topic=topic, text=text, queued=queued)

    def _failed(
        self,
        rollout_id: int,
        action: _Pending,
        held: Held,
        now: datetime,
        error: str,
        bound: Any,
    ) -> None:
        bound.warning("action failed", key=action.key, attempt=action.attempts + 1, error=error)
        retry_at = None
        if action.kind in ("deploy", "verify"):
            # Redeploys and health checks are slow and hit engines: back off, up to 5 min.
            retry_at = self.wall() + min(RETRY_BASE * 2**action.attempts, RETRY_MAX)
        with self._write(held) as session:
            queries.bump_action_attempt(session, action.id, error=error, retry_at=retry_at)
            queries.append_event(
                session,
                rollout_id=rollout_id,
                kind="action_failed",
                actor=self.actor,
                detail=f"{action.key} failed (attempt {action.attempts + 1}): {error}",
                now=now,
                dedup_key=f"{action.key}/attempt-{action.attempts + 1}",
            )
            if action.attempts + 1 == STUCK_AFTER_ATTEMPTS:
                queries.enqueue_actions(
                    session,
                    rollout_id=rollout_id,
                    actions=[
                        (
                            f"alert/stuck/{action.key}",
                            "alert",
                            {
                                "topic": "action_stuck",
                                "severity": "critical",
                                "text": f"{action.key} keeps failing: {error}",
                            },
                        )
                    ],
                    now=now,
                )


@dataclass(frozen=True)
class _Pending:
    """An action row detached from its session."""

    id: int
    key: str
    kind: str
    payload: dict[str, Any]
    attempts: int
    retry_at: datetime | None = None

    @classmethod
    def of(cls, row: Action) -> _Pending:
        return cls(row.id, row.key, row.kind, dict(row.payload), row.attempts, row.next_attempt_at)


def _earlier_windows(
    plan: Plan,
    gate: str,
    role: Role,
    progress: Progress,
    verified: dict[int, datetime | None],
    completed: dict[int, datetime | None],
) -> tuple[tuple[datetime, datetime], ...]:
    """The (verified, completed) windows of the steps before this one that judged ``gate``
    (a trigger judges every step) while both pools served traffic."""
    windows = []
    for i in range(progress.step_index):
        if role == "step" and gate not in plan.steps[i].gates:
            continue
        if plan.idle_pool(i) is not None:
            continue
        start, end = verified.get(i), completed.get(i)
        if start is not None and end is not None and end > start:
            windows.append((start, end))
    return tuple(windows)


def _final_window(
    plan: Plan,
    gate: str,
    progress: Progress,
    verified: dict[int, datetime | None],
    now: datetime,
) -> FinalWindow | None:
    """Where a gate's final look looks, if this is the last step that carries the gate.

    It starts when the first step carrying the gate was verified on the router and ends
    where this step's bake clock reached the bake (paused time excluded); ``end`` is None
    until then. The end is fixed once passed, so every later look sees the same data.
    """
    carrying = [i for i, step in enumerate(plan.steps) if gate in step.gates]
    if not carrying or carrying[-1] != progress.step_index:
        return None
    start = verified.get(carrying[0]) or progress.step_verified_at
    if start is None:
        return None
    hold = plan.steps[progress.step_index].hold_for().total_seconds()
    baked = progress.baked(now).total_seconds()
    if baked < hold:
        return FinalWindow(start, None)
    if progress.bake_mark is not None and progress.baked_seconds <= hold:
        return FinalWindow(
            start, progress.bake_mark + timedelta(seconds=hold - progress.baked_seconds)
        )
    return FinalWindow(start, now - timedelta(seconds=baked - hold))


def _command(row: Any) -> Command:
    return Command(
        id=row.id,
        kind=row.kind,
        actor=row.actor,
        reason=row.reason,
        full=bool((row.args or {}).get("full")),
    )


def _record(session: Session, rollout_id: int, step_index: int, evaluation: Evaluation) -> None:
    queries.record_evaluation(
        session,
        rollout_id=rollout_id,
        step_index=step_index,
        gate=evaluation.gate,
        role=evaluation.role,
        verdict=evaluation.verdict.value,
        value=evaluation.value,
        threshold=evaluation.threshold,
        query=evaluation.query,
        samples=evaluation.samples,
        statistic=evaluation.statistic,
        reason=evaluation.reason or None,
        evidence=evaluation.evidence,
        evaluated_at=evaluation.evaluated_at,
    )


def _verdicts(
    session: Session, rollout_id: int, plan: Plan, progress: Progress
) -> Mapping[str, GateResult]:
    """The newest verdict per gate: this step's for step gates, any step's for triggers."""
    at_step = queries.latest_evaluations(session, rollout_id, step_index=progress.step_index)
    overall = queries.latest_evaluations(session, rollout_id)
    results: dict[str, GateResult] = {}
    for gate in plan.rollback.triggers:
        if gate in overall:
            results[gate] = _result(overall[gate])
    for gate in plan.gates_of(progress.step_index):
        if gate in at_step:
            results[gate] = _result(at_step[gate])
    return results


def _result(row: Any) -> GateResult:
    return GateResult(
        verdict=Verdict(row.verdict),
        evaluated_at=row.evaluated_at,
        reason=row.reason or "",
        value=row.value,
        threshold=row.threshold,
    )


def _record_steps(
    session: Session,
    rollout: Rollout,
    plan: Plan,
    before: Progress,
    after: Progress,
    now: datetime,
) -> None:
    """Keep the per-step table in step with the progress facts, for reports and history."""
    if after.started_at is None:
        return
    if after.step_index != before.step_index or after.ended == "completed":
        _step_row(session, rollout, plan, before.step_index, completed_at=now)
    _step_row(
        session,
        rollout,
        plan,
        after.step_index,
        entered_at=after.step_entered_at,
        verified_at=after.step_verified_at,
    )


def _step_row(
    session: Session,
    rollout: Rollout,
    plan: Plan,
    index: int,
    *,
    entered_at: datetime | None = None,
    verified_at: datetime | None = None,
    completed_at: datetime | None = None,
) -> None:
    step = plan.steps[index]
    queries.upsert_step(
        session,
        rollout_id=rollout.id,
        step_index=index,
        name=step.title(),
        kind=step.kind,
        weight=plan.step_weight(index),
        entered_at=entered_at,
        verified_at=verified_at,
        completed_at=completed_at,
    )


__all__ = ["NotLeading", "Reconciler", "StaleWrite", "TickResult"]
