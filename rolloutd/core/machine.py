"""The rollout state machine: progress facts, verdicts, commands and ``now`` in; decisions out.

Pure by design: no sockets, no clock, no database. The daemon loads the facts, asks
:func:`decide`, writes the new facts and the returned actions in one transaction,
then performs the actions. That split is what makes every rule below testable in
microseconds and the whole machine checkable with property tests.

The rules, in the order they apply on a tick:

1. A terminal rollout does nothing; every command is rejected.
2. A pending rollout starts (or fails its preflight, or is aborted before any traffic moved).
3. Operator commands apply in the order they were given.
4. Gates are judged: any rollback-trigger failure or any breach starts the rollback.
   Missing data is judged per gate, by the gate's ``on_no_data``: a gate with more
   inconclusive evaluations in a row than the limit, or one still short of the step's
   ``min_samples`` once the step's extension ran out, holds the rollout (a pause that lifts
   by itself once every gate has data again), rolls it back, or holds and then rolls back
   after ``rollback_after``, counted on the rollout clock (``now``) with the hold
   included, since the hold itself stops the bake clock.
5. A rollback moves through its phases as the world shows them done: the router reads 0,
   then every canary replica was redeployed, then every one verified; only then, with the
   router still reading 0, does it end ``rolled_back`` (outcome ``verified``). Without an
   executor it ends once the router reads 0, with the outcome ``traffic_only``: the canary
   build stays on the canary replicas, and every view says so. Until then it stays
   ``rolling_back``.
6. A step counts as reached only when the router reads its desired weight back; it
   completes when its bake has elapsed (or it was promoted) and every gate passed after
   it was reached, resting on at least the step's ``min_samples``. A step whose gates
   are short of samples when its bake ends is extended, by up to ``max_extension`` of
   bake time; no traffic is never a pass.

What the router must serve is a fact (:class:`~rolloutd.core.progress.Desired`), changed only
here and stored with the decision; the shell brings the router to it (read, set, read back).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rolloutd.core import nodata
from rolloutd.core.actions import (
    Action,
    Alert,
    Command,
    CommandOutcome,
    Deploy,
    Event,
    GateResult,
    Observed,
    Severity,
    Verdict,
    Verify,
)
from rolloutd.core.counts import counted
from rolloutd.core.durations import format_duration
from rolloutd.core.plan import FullStep, NoExecutor, PauseStep, Plan, SteadyStep
from rolloutd.core.progress import (
    TRAFFIC_ONLY,
    Desired,
    Ending,
    Progress,
    RollbackFacts,
    RollbackKind,
    State,
    derive_state,
)


@dataclass(frozen=True)
class Decision:
    """The machine's answer for one tick."""

    progress: Progress
    state: State
    actions: tuple[Action, ...]
    events: tuple[Event, ...]
    outcomes: tuple[CommandOutcome, ...]


def state_of(plan: Plan, progress: Progress) -> State:
    """The user-facing state of ``progress`` under ``plan``."""
    step = plan.steps[min(progress.step_index, len(plan.steps) - 1)]
    return derive_state(progress, awaiting_promotion=step.awaits_promotion())


def breaches(plan: Plan, gate: str, verdict: Verdict) -> bool:
    """Whether ``verdict`` of ``gate`` starts a rollback: a breach, or a trigger's failure."""
    return verdict is Verdict.BREACH or (gate in plan.rollback.triggers and verdict is Verdict.FAIL)


def rollback_kind(triggers: Collection[str], facts: RollbackFacts) -> RollbackKind:
    """What started the rollback: stored since rollbacks were classified, before that read
    from the cause the machine wrote (``triggers``: the plan's rollback triggers)."""
    if facts.kind is not None:
        return facts.kind
    if facts.gate is not None:
        return "trigger" if facts.gate in triggers else "gate"
    if facts.cause.startswith("aborted by "):
        return "abort"
    if "inconclusive evaluations in a row" in facts.cause:
        return "no_data"
    return "deadline"


def deploy_key(replica: str) -> str:
    """The key of the rollback's redeploy of ``replica``."""
    return f"rollback/deploy/{replica}"


def verify_key(replica: str) -> str:
    """The key of the rollback's verification of ``replica``."""
    return f"rollback/verify/{replica}"


def desired_of(plan: Plan, progress: Progress) -> Desired:
    """The desired fact of ``progress``: stored, or for progress written before it was a
    fact, derived from the step (or the rollback) the rollout is in."""
    if progress.desired is not None:
        return progress.desired
    if progress.rollback is not None:
        return Desired(0, False)
    index = min(progress.step_index, len(plan.steps) - 1)
    return Desired(plan.step_weight(index), plan.step_mirrors(index))


def refusal(plan: Plan, progress: Progress, kind: str, *, full: bool = False) -> str | None:
    """Why ``kind`` makes no sense now, or None when it may be applied.

    ``rolloutctl`` asks this before writing a command, and :func:`decide` asks it again
    when applying the command, since the rollout may have moved on in between.
    """
    state = state_of(plan, progress)
    if state.terminal:
        return f"the rollout has ended ({state})"
    if state is State.ROLLING_BACK:
        return "the rollout is rolling back"
    if kind == "abort":
        return None
    if state is State.PENDING:
        return f"the rollout has not started yet; only abort applies to a {state} rollout"
    if kind == "pause":
        return "the rollout is already paused" if state is State.PAUSED else None
    if kind == "resume":
        return None if state is State.PAUSED else f"the rollout is not paused (it is {state})"
    if kind == "promote":
        if state is State.PAUSED:
            return "the rollout is paused; resume it first"
        if full:
            target = _full_index(plan)
            if target is None:
                return "the plan has no 'full' step to promote to"
            if progress.step_index >= target:
                return "the rollout is already at or past its 'full' step"
        return None
    return f"unknown command {kind!r}"


def decide(
    plan: Plan,
    progress: Progress,
    *,
    verdicts: Mapping[str, GateResult],
    commands: Sequence[Command],
    observed: Observed,
    now: datetime,
    preflight_error: str | None = None,
) -> Decision:
    """Compute the next progress facts and the actions to take; see the module docstring."""
    if progress.started_at is not None and progress.ended is None and progress.desired is None:
        progress = replace(progress, desired=desired_of(plan, progress))
    tick = _Tick(plan, progress, now)
    if progress.ended is not None:
        tick.reject_all(commands)
    elif progress.started_at is None:
        tick.begin(commands, preflight_error)
    else:
        tick.apply(commands)
        tick.judge(verdicts)
        tick.move(verdicts, observed)
    return tick.decision()


def _full_index(plan: Plan) -> int | None:
    return next((i for i, s in enumerate(plan.steps) if isinstance(s, FullStep)), None)


class _Tick:
    """The working state of one :func:`decide` call."""

    def __init__(self, plan: Plan, progress: Progress, now: datetime) -> None:
        self.plan = plan
        self.p = progress
        self.now = now
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.outcomes: list[CommandOutcome] = []
        self.rollback_started = False

    def decision(self) -> Decision:
        return Decision(
            progress=self.p,
            state=state_of(self.plan, self.p),
            actions=tuple(self.actions),
            events=tuple(self.events),
            outcomes=tuple(self.outcomes),
        )

    # -- starting --------------------------------------------------------------------------

    def begin(self, commands: Sequence[Command], preflight_error: str | None) -> None:
        abort = next((c for c in commands if c.kind == "abort"), None)
        for command in commands:
            if command is not abort:
                self.reject(command, "the rollout was not started yet")
        if abort is not None:
            # Nothing has moved yet, so there is nothing to roll back.
            self.outcomes.append(CommandOutcome(abort.id, True, "aborted before it started"))
            self.end("aborted", f"aborted by {abort.by} before it started: {abort.reason}")
            return
        if preflight_error is not None:
            self.p = replace(self.p, started_at=self.now)
            self.end("failed", f"could not start: {preflight_error}", severity="critical")
            return
        self.p = replace(self.p, started_at=self.now)
        self.events.append(Event("started", f"rollout started with plan {self.plan.name}"))
        self.enter(0)

    # -- operator commands -----------------------------------------------------------------

    def reject_all(self, commands: Sequence[Command]) -> None:
        for command in commands:
            self.reject(command, f"the rollout has ended ({self.p.ended})")

    def reject(self, command: Command, why: str) -> None:
        self.outcomes.append(CommandOutcome(command.id, False, why))
        self.events.append(
            Event("command_rejected", f"{command.kind} rejected: {why}", actor=command.actor)
        )

    def apply(self, commands: Sequence[Command]) -> None:
        for command in commands:
            why = refusal(self.plan, self.p, command.kind, full=command.full)
            if why is not None:
                self.reject(command, why)
                continue
            detail = getattr(self, f"_{command.kind}")(command)
            self.outcomes.append(CommandOutcome(command.id, True, detail))

    def _abort(self, command: Command) -> str:
        self.start_rollback(
            f"aborted by {command.by}: {command.reason}", kind="abort", actor=command.actor
        )
        return "rollback started"

    def _pause(self, command: Command) -> str:
        self.p = replace(self.p.stop_clock(self.now), paused="operator")
        self.events.append(
            Event("paused", _said(command, "paused"), command.actor, {"cause": "operator"})
        )
        return "paused"

    def _resume(self, command: Command) -> str:
        self.resume(_said(command, "resumed"), actor=command.actor)
        return "resumed"

    def _promote(self, command: Command) -> str:
        if command.full:
            target = _full_index(self.plan)
            assert target is not None  # refusal() has checked
            self.events.append(
                Event("promoted", _said(command, "promoted to full"), actor=command.actor)
            )
            self.enter(target)
            return "promoted to full"
        step = self.plan.steps[self.p.step_index]
        self.events.append(
            Event("promoted", _said(command, f"promoted {step.title()}"), actor=command.actor)
        )
        if isinstance(step, PauseStep):
            self.complete()
            return "pause ended"
        # A promotion ends the bake where it stands; the step's gates must still pass, and
        # the progress deadline now runs from this moment.
        baked = self.p.baked(self.now).total_seconds()
        self.p = replace(self.p, promoted=True, promoted_after_seconds=baked)
        return "bake ended early; the step completes once its gates pass"

    def resume(self, detail: str, *, actor: str = "rolloutd") -> None:
        mark = self.now if self.p.step_verified_at is not None else None
        self.p = replace(
            self.p,
            paused=None,
            bake_mark=mark,
            inconclusive_streaks={},
            no_data_since={},
            short_since=None,
        )
        self.events.append(Event("resumed", detail, actor=actor))

    # -- gates -----------------------------------------------------------------------------

    def judge(self, verdicts: Mapping[str, GateResult]) -> None:
        if self.p.rollback is not None:
            return
        triggers = self.plan.rollback.triggers
        streaks = dict(self.p.inconclusive_streaks)
        no_data = dict(self.p.no_data_since)
        seen = dict(self.p.last_seen)
        for gate, since in self.relevant_gates(triggers).items():
            result = verdicts.get(gate)
            if result is None or since is None or result.evaluated_at < since:
                continue
            if gate not in seen or result.evaluated_at > seen[gate]:
                seen[gate] = result.evaluated_at
                if result.verdict is Verdict.INCONCLUSIVE or self.starved(gate, result):
                    streaks[gate] = streaks.get(gate, 0) + 1
                    no_data.setdefault(gate, result.evaluated_at)
                else:
                    streaks[gate] = 0
                    no_data.pop(gate, None)
                if result.verdict is Verdict.FAIL and self.plan.gates[gate].kind == "capacity":
                    self.capacity_invalid(gate, result)
            if breaches(self.plan, gate, result.verdict):
                self.p = replace(
                    self.p, inconclusive_streaks=streaks, no_data_since=no_data, last_seen=seen
                )
                cause = f"gate {gate} breached" + (f": {result.reason}" if result.reason else "")
                kind: RollbackKind = "trigger" if gate in triggers else "gate"
                self.start_rollback(cause, kind=kind, gate=gate, result=result)
                return
        self.p = replace(
            self.p, inconclusive_streaks=streaks, no_data_since=no_data, last_seen=seen
        )
        self.judge_no_data(verdicts)

    def starved(self, gate: str, result: GateResult) -> bool:
        """A latency gate still pending for want of samples once the step's bake is over:
        no traffic is no data, and it counts toward the inconclusive limit like missing
        data does, instead of holding the step without a word."""
        if result.verdict is not Verdict.PENDING or self.plan.gates[gate].kind != "latency":
            return False
        step = self.plan.steps[self.p.step_index]
        if gate not in step.gates or self.p.step_verified_at is None:
            return False
        # A gate the step counts samples for waits out the step's extension first.
        extension = step.extension() if gate in step.min_samples else timedelta(0)
        return self.p.baked(self.now) >= step.hold_for() + extension

    def capacity_invalid(self, gate: str, result: GateResult) -> None:
        """Tell people once per step: the assumption the change was planned on does not hold."""
        data: dict[str, object] = {
            "gate": gate,
            "value": result.value,
            "threshold": result.threshold,
        }
        key = f"alert/capacity_invalid/step-{self.p.step_index}"
        if any(a.key == key for a in self.actions):
            return
        self.events.append(Event("capacity_invalid", result.reason or gate, data=data))
        text = f"Capacity assumption invalid ({gate}): {result.reason}"
        self.actions.append(Alert(key, "capacity_invalid", "warning", text, data))

    def relevant_gates(self, triggers: Sequence[str]) -> dict[str, datetime | None]:
        """Gate name -> the earliest evaluation time that counts for this step."""
        gates: dict[str, datetime | None] = dict.fromkeys(triggers, self.p.started_at)
        for gate in self.plan.gates_of(self.p.step_index):
            gates.setdefault(gate, self.p.step_entered_at)
        return gates

    def judge_no_data(self, verdicts: Mapping[str, GateResult]) -> None:
        """Each gate without data (see :mod:`rolloutd.core.nodata`) holds the rollout or rolls it
        back, as its ``on_no_data`` says; the hold lifts once every gate has data again."""
        lacking = nodata.over_limit(self.plan, self.p, self.now, verdicts)
        for gate, lack in self.past_extension(verdicts).items():
            lacking.setdefault(gate, lack)
        if self.p.paused == "operator":
            # An operator holds the rollout: missing data neither pauses nor rolls it back.
            return
        if not lacking:
            if self.p.paused == "inconclusive":
                # The data is back; an automatic pause lifts by itself, an operator's does not.
                self.resume("resumed: every gate has data again")
            return
        due = {}
        for gate, lack in lacking.items():
            why = nodata.gives_up(self.plan, gate, lack, self.now)
            if why is not None:
                due[gate] = nodata.Lack(why, lack.since)
        if due:
            cause = f"no data: {nodata.describe(due)}"
            self.start_rollback(cause, kind="no_data", gate=next(iter(due)))
        elif self.p.paused is None:
            cause = nodata.describe(lacking)
            self.p = replace(self.p.stop_clock(self.now), paused="inconclusive")
            data: dict[str, object] = {"cause": "no_data", "gates": list(lacking)}
            self.events.append(Event("paused", f"paused: {cause}", data=data))
            self.alert("inconclusive_limit", "warning", f"Rollout paused: {cause}")

    def past_extension(self, verdicts: Mapping[str, GateResult]) -> dict[str, nodata.Lack]:
        """The step's gates still short of ``min_samples`` once its bake and extension are
        over. The bake ending short extends it (once per step, with an event and an alert)."""
        short = nodata.short_of_samples(self.plan, self.p, verdicts)
        bake = nodata.bake_of(self.plan, self.p)
        extension = self.plan.steps[self.p.step_index].extension()
        baked = self.p.baked(self.now)
        if not short or baked < bake:
            self.p = replace(self.p, short_since=None)
            return {}
        if not self.p.extended and extension > timedelta(0):
            detail, data = nodata.extension_notice(self.plan, self.p, short)
            self.p = replace(self.p, extended=True)
            event_data = {"step": self.p.step_index, **data}
            self.events.append(Event("step_extended", detail, data=event_data))
            self.alert("step_extended", "warning", f"Bake extended: {detail}", data)
        if baked < bake + extension:
            self.p = replace(self.p, short_since=None)
            return {}
        since = self.p.short_since or self.now
        self.p = replace(self.p, short_since=since)
        return {
            gate: nodata.Lack(f"{counted(seen, 'sample')} of the {needed} the step needs", since)
            for gate, (seen, needed) in short.items()
        }

    # -- moving through the steps ----------------------------------------------------------

    def move(self, verdicts: Mapping[str, GateResult], observed: Observed) -> None:
        if self.p.rollback is not None:
            # What was observed before this tick's decision cannot show the rollback's
            # progress: a rollback started now moves on from the next read-back.
            if not self.rollback_started:
                self.finish_rollback(observed)
        elif self.p.paused is None:
            self.advance(verdicts, observed)

    def advance(self, verdicts: Mapping[str, GateResult], observed: Observed) -> None:
        index = self.p.step_index
        step = self.plan.steps[index]
        weight = self.plan.step_weight(index)
        deadline = self.plan.limits.progress_deadline
        if self.p.step_verified_at is None:
            desired = desired_of(self.plan, self.p)
            if desired.served_by(observed.router_weight, observed.router_mirror):
                self.p = replace(self.p, step_verified_at=self.now, bake_mark=self.now)
                self.events.append(Event("weight_verified", f"router reads {weight}% canary"))
            elif (
                deadline is not None
                and self.p.step_entered_at is not None
                and self.now - self.p.step_entered_at > deadline
            ):
                self.start_rollback(
                    f"the router did not confirm {weight}% within {format_duration(deadline)}",
                    kind="deadline",
                )
            return
        baked = self.p.baked(self.now)
        if isinstance(step, PauseStep):
            if step.duration is not None and baked >= step.duration:
                self.complete()
            return
        hold = nodata.bake_of(self.plan, self.p)
        verified_at = self.p.step_verified_at
        waiting = [g for g in step.gates if not _passed_since(verdicts.get(g), verified_at)]
        short = nodata.short_of_samples(self.plan, self.p, verdicts)
        if baked >= hold and not waiting and not short:
            self.complete()
            return
        # Gates short of samples are missing data (judge_no_data); the deadline is for gates
        # that do not pass, and an extended bake moves it on by the extension.
        if self.p.extended:
            hold += step.extension()
        if (
            deadline is not None
            and waiting
            and baked - hold > deadline
            and not isinstance(step, SteadyStep)
        ):
            # At steady the canary already serves everyone: a failing watch alerts and holds.
            self.start_rollback(
                f"{step.title()} did not pass {', '.join(waiting)} within "
                f"{format_duration(deadline)} after its bake",
                kind="deadline",
            )

    def complete(self) -> None:
        index = self.p.step_index
        self.events.append(Event("step_completed", f"{self.plan.step_named(index)} completed"))
        if index + 1 >= len(self.plan.steps):
            self.end("completed", "rollout completed: the canary build serves all sessions")
        else:
            self.enter(index + 1)

    def enter(self, index: int) -> None:
        step = self.plan.steps[index]
        weight = self.plan.step_weight(index)
        mirror = self.plan.step_mirrors(index)
        self.p = replace(
            self.p,
            step_index=index,
            step_entered_at=self.now,
            step_verified_at=None,
            baked_seconds=0.0,
            bake_mark=None,
            promoted=False,
            promoted_after_seconds=0.0,
            extended=False,
            short_since=None,
        )
        self.want(weight, mirror)
        self.events.append(
            Event("step_entered", f"{self.plan.step_named(index)} entered: canary weight {weight}%")
        )
        if step.awaits_promotion():
            self.alert("awaiting_promotion", "info", f"Waiting for promotion at {weight}% canary")

    def want(self, weight: int, mirror: bool) -> None:
        """Make (weight, mirror) the desired fact, one generation on.

        A step entered and left in one tick (promote, then promote --full) leaves only the
        fact the tick ends with: the shell converges the router to that one.
        """
        current = self.p.desired
        desired = Desired(weight, mirror) if current is None else current.changed_to(weight, mirror)
        self.p = replace(self.p, desired=desired)

    def step_title(self) -> str:
        return self.plan.steps[self.p.step_index].title()

    # -- rolling back and ending -----------------------------------------------------------

    def start_rollback(
        self,
        cause: str,
        *,
        kind: RollbackKind,
        gate: str | None = None,
        result: GateResult | None = None,
        actor: str = "rolloutd",
    ) -> None:
        self.rollback_started = True
        facts = RollbackFacts(cause=cause, started_at=self.now, gate=gate, kind=kind)
        self.p = replace(self.p.stop_clock(self.now), rollback=facts, paused=None)
        self.want(0, False)
        data: dict[str, object] = {
            "step": self.p.step_index,
            "step_name": self.step_title(),
            "cause": kind,
        }
        if gate is not None and result is not None:
            data.update(gate=gate, value=result.value, threshold=result.threshold)
        self.events.append(Event("rollback_started", f"rollback started: {cause}", actor, data))
        self.alert("rollback_started", "critical", f"Rolling back: {cause}", data)

    def finish_rollback(self, observed: Observed) -> None:
        """Weight 0 (read back) -> redeploy the stable set on every canary replica -> verify
        each one's health and digests -> rolled_back. The phase and the replicas that still
        owe it are facts; each replica action is issued only in its phase, so a crash
        resumes where it stopped and a step that keeps failing holds the rollout in
        rolling_back."""
        rollback = self.p.rollback
        assert rollback is not None
        replicas = tuple(r.name for r in self.plan.pools.canary.replicas)
        stable = self.plan.artefacts.stable
        served = desired_of(self.plan, self.p).served_by(
            observed.router_weight, observed.router_mirror
        )
        if rollback.phase == "weight":
            if not served:
                return
            if isinstance(self.plan.executor, NoExecutor):
                self.end_traffic_only(rollback, self.plan.executor.reason)
                return
            rollback = replace(rollback, phase="redeploy", owed=replicas)
        if rollback.phase == "redeploy":
            owed = tuple(r for r in rollback.owed if deploy_key(r) not in observed.done_actions)
            rollback = replace(rollback, owed=owed)
            if not owed:
                rollback = replace(rollback, phase="verify", owed=replicas)
        if rollback.phase == "verify":
            owed = tuple(r for r in rollback.owed if verify_key(r) not in observed.done_actions)
            rollback = replace(rollback, owed=owed)
        if rollback.owed:
            self.p = replace(self.p, rollback=rollback)
            # The journal ignores keys it already holds, so asking again adds nothing.
            action = Deploy if rollback.phase == "redeploy" else Verify
            key = deploy_key if rollback.phase == "redeploy" else verify_key
            self.actions.extend(action(key(r), r, stable) for r in rollback.owed)
            return
        if not served:
            # A late write put canary traffic back while the replicas were redeployed: the
            # shell repairs the router toward 0, and the rollback ends once it reads 0 again.
            self.p = replace(self.p, rollback=rollback)
            return
        self.p = replace(self.p, rollback=replace(rollback, outcome="verified"))
        self.end(
            "rolled_back",
            f"rollback finished: the router reads 0% canary and {', '.join(replicas)} "
            f"verified healthy on the pinned set {stable}",
            data={"rollback": "verified"},
        )

    def end_traffic_only(self, rollback: RollbackFacts, reason: str | None) -> None:
        """The plan has no executor (``reason``: why, as it says): the rollback ends once the
        router reads 0%, with the canary build still on the canary replicas. That outcome is
        stored and said, so nobody takes it for a verified rollback."""
        self.p = replace(
            self.p,
            rollback=replace(rollback, outcome="traffic_only", no_executor_reason=reason),
        )
        canary = self.plan.artefacts.canary
        detail = (
            f"rollback finished ({TRAFFIC_ONLY}): the router reads 0% canary; no replica was "
            f"redeployed or verified, the canary replicas still hold {canary}"
            + (f"; the plan has no executor because: {reason}" if reason else "")
        )
        # Warn, not inform: someone must still put the stable set back on those replicas.
        data: dict[str, object] = {"rollback": "traffic_only", "no_executor_reason": reason}
        self.end("rolled_back", detail, severity="warning", data=data)

    def end(
        self,
        ending: Ending,
        detail: str,
        *,
        severity: Severity = "info",
        data: dict[str, object] | None = None,
    ) -> None:
        self.p = replace(self.p.stop_clock(self.now), ended=ending, ended_at=self.now)
        self.events.append(Event(ending, detail, data=dict(data or {})))
        self.alert(ending, severity, detail, data)

    def alert(
        self, topic: str, severity: Severity, text: str, data: dict[str, object] | None = None
    ) -> None:
        # `now` is an input, so the key is deterministic and a replayed tick adds no duplicate.
        key = f"alert/{topic}/step-{self.p.step_index}/{self.now.isoformat()}"
        payload = {"step": self.p.step_index, **(data or {})}
        self.actions.append(Alert(key, topic, severity, text, payload))


def _passed_since(result: GateResult | None, since: datetime) -> bool:
    """Whether the gate's newest verdict is a pass given after ``since`` (the step was reached)."""
    return result is not None and result.verdict is Verdict.PASS and result.evaluated_at >= since


def _said(command: Command, what: str) -> str:
    return f"{what} by {command.by}" + (f": {command.reason}" if command.reason else "")
