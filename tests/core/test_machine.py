"""Tests for rolloutd.core.machine: each rule of the rollout state machine, one at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial

import pytest

from rolloutd.core.actions import (
    Alert,
    CommandKind,
    Deploy,
    Event,
    GateResult,
    Observed,
    Verdict,
    Verify,
)
from rolloutd.core.machine import Decision, decide, refusal, rollback_kind, state_of
from rolloutd.core.plan import Plan
from rolloutd.core.progress import (
    Desired,
    Progress,
    RollbackFacts,
    State,
    rollback_outcome,
    shown_state,
)
from tests.plans import (
    NO_EXECUTOR,
    PLENTY,
    REPO,
    T0,
    SetWeight,
    World,
    alert_topics,
    attempted,
    command,
    example_plan,
    plan_of,
    results,
    small_dict,
    small_plan,
    traffic_only_example_plan,
    weights_set,
)

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def at_first_canary(plan: Plan | None = None) -> World:
    """The example rollout (or one of ``plan``) with step 1 (canary 5%, 48h bake) entered and
    verified."""
    return World(plan or example_plan()).reach(1)


def step_gates(world: World, verdict: Verdict, **overrides: Verdict) -> dict[str, GateResult]:
    """``verdict`` for every gate of the current step (``overrides`` by name), evaluated now."""
    gates = world.plan.gates_of(world.progress.step_index)
    return results(world.now, {g: overrides.get(g, verdict) for g in gates})


def rolled_back_world() -> World:
    """An example rollout aborted at the first canary, rollback confirmed: the router reads 0,
    then the canary replica is redeployed, then verified (a tick each)."""
    world = at_first_canary()
    world.tick(commands=[command("abort")])
    for _ in range(3):
        world.tick()
    assert world.state is State.ROLLED_BACK
    return world


def assert_deadline_is_now(
    world: World, verdicts: Callable[[World], dict[str, GateResult]], cause: str
) -> None:
    """A tick now still runs and a tick one second later rolls back with ``cause`` in its
    reason, ``verdicts(world)`` giving the gate results of each tick."""
    assert world.tick(verdicts(world)).state is State.RUNNING
    world.wait(timedelta(seconds=1))
    decision = world.tick(verdicts(world))
    assert decision.state is State.ROLLING_BACK
    assert decision.progress.rollback is not None
    assert cause in decision.progress.rollback.cause


# --- starting -------------------------------------------------------------------------------


def test_first_tick_starts_the_rollout_and_mirrors_traffic_for_shadow() -> None:
    """A pending rollout starts on its first tick, enters step 0 and asks for mirrored weight 0."""
    world = World(small_plan())
    decision = world.tick()
    assert decision.state is State.RUNNING
    assert decision.progress.started_at == T0
    assert (decision.progress.step_index, decision.progress.step_entered_at) == (0, T0)
    set_weights = attempted(Progress(), decision)
    assert set_weights == [SetWeight("weight@gen1=0+mirror", 0, mirror=True)]


def test_a_shadow_step_without_mirroring_asks_for_plain_weight_zero() -> None:
    """The example plan's shadow step (HAProxy, mirror: false) sets weight 0 without a mirror."""
    decision = World(example_plan()).tick()
    set_weights = attempted(Progress(), decision)
    assert set_weights == [SetWeight("weight@gen1=0", 0, mirror=False)]


def test_abort_of_a_pending_rollout_ends_aborted_without_moving_traffic() -> None:
    """Aborting before the first tick ends the rollout ``aborted`` with no weight change."""
    world = World(example_plan())
    decision = world.tick(commands=[command("abort")])
    assert decision.state is State.ABORTED
    assert weights_set(world.last) == []
    assert [o.applied for o in decision.outcomes] == [True]
    assert decision.progress.rollback is None


def test_preflight_error_on_a_pending_rollout_ends_failed() -> None:
    """A preflight error ends the rollout ``failed`` with a critical alert and no weight change."""
    world = World(example_plan())
    decision = world.tick(preflight_error="canary replica gpu-d is unreachable")
    assert decision.state is State.FAILED
    assert weights_set(world.last) == []
    (alert,) = [a for a in decision.actions if isinstance(a, Alert)]
    assert alert.severity == "critical"
    assert "gpu-d is unreachable" in alert.text


def test_commands_other_than_abort_are_rejected_before_the_start() -> None:
    """A promote sent to a pending rollout is rejected and the rollout starts normally."""
    world = World(example_plan())
    decision = world.tick(commands=[command("promote")])
    assert [o.applied for o in decision.outcomes] == [False]
    assert decision.state is State.RUNNING
    assert decision.progress.step_index == 0


# --- reaching a step ------------------------------------------------------------------------


def test_step_is_reached_when_the_router_reads_its_weight_and_the_action_is_done() -> None:
    """The tick after the weight lands, the step is verified and its bake clock starts."""
    world = World(example_plan())
    world.tick()
    assert world.progress.step_verified_at is None
    world.wait(MINUTE)
    decision = world.tick()
    assert decision.progress.step_verified_at == world.now
    assert decision.progress.bake_mark == world.now


def test_a_lagging_router_keeps_the_step_unverified_and_the_bake_stopped() -> None:
    """While the router still reads the old weight, the step is not reached and no bake accrues."""
    world = at_first_canary()
    world.lag = 3
    world.wait(world.plan.steps[1].hold_for())
    world.tick(world.passing())
    assert world.progress.step_index == 2
    for _ in range(3):
        world.wait(HOUR)
        world.tick(world.passing())
        assert world.progress.step_verified_at is None
        assert world.progress.baked(world.now) == timedelta(0)
    world.wait(HOUR)
    world.tick(world.passing())
    assert world.progress.step_verified_at == world.now


def test_the_router_reading_the_desired_weight_verifies_whatever_the_journal_says() -> None:
    """The read-back is the truth: an attempt not yet marked done does not hold a step back."""
    world = World(example_plan(), mark_done=False)
    world.tick()
    world.wait(HOUR)
    decision = world.tick()
    assert decision.progress.step_verified_at == world.now


def test_a_router_reading_another_weight_than_the_desired_one_does_not_verify() -> None:
    """The desired weight is 5 but the router reads 0: step 1 stays unverified."""
    plan = example_plan()
    progress = replace(World(plan).reach(1).progress, step_verified_at=None, bake_mark=None)
    decision = decide(
        plan,
        progress,
        verdicts={},
        commands=[],
        observed=Observed(router_weight=0),
        now=T0 + 100 * HOUR,
    )
    assert decision.progress.step_verified_at is None


# --- completing a step ----------------------------------------------------------------------


def test_a_step_completes_when_its_bake_elapsed_and_every_gate_passed() -> None:
    """At 48h with every gate passing, canary 5% completes and 25% is requested."""
    world = at_first_canary()
    world.wait(timedelta(hours=48))
    decision = world.tick(step_gates(world, Verdict.PASS))
    assert decision.progress.step_index == 2
    assert weights_set(world.last) == [("weight@gen3=25", 25)]


def test_a_step_does_not_complete_before_its_bake_elapsed() -> None:
    """One second short of the 48h bake, passing gates do not complete the step."""
    world = at_first_canary()
    world.wait(timedelta(hours=48) - timedelta(seconds=1))
    decision = world.tick(step_gates(world, Verdict.PASS))
    assert decision.progress.step_index == 1
    assert weights_set(world.last) == []


@pytest.mark.parametrize("holding", [Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.PENDING, None])
def test_a_step_holds_while_any_gate_is_not_passing(holding: Verdict | None) -> None:
    """After the bake, one gate that failed, is inconclusive, pending or absent holds the step."""
    world = at_first_canary()
    world.wait(timedelta(hours=49))
    verdicts = step_gates(world, Verdict.PASS)
    if holding is None:
        del verdicts["queue_timeouts"]
    else:
        verdicts["queue_timeouts"] = GateResult(holding, world.now)
    decision = world.tick(verdicts)
    assert decision.progress.step_index == 1
    assert decision.state is State.RUNNING


def test_a_pass_from_before_the_step_was_verified_does_not_count() -> None:
    """A gate that last passed a second before the weight was verified still holds the step."""
    world = at_first_canary()
    verified = world.progress.step_verified_at
    assert verified is not None
    world.wait(timedelta(hours=48))
    verdicts = step_gates(world, Verdict.PASS)
    verdicts["queue_timeouts"] = GateResult(Verdict.PASS, verified - timedelta(seconds=1))
    assert world.tick(verdicts).progress.step_index == 1
    verdicts["queue_timeouts"] = GateResult(Verdict.PASS, verified)
    assert world.tick(verdicts).progress.step_index == 2


# --- gate failures and breaches -------------------------------------------------------------


def test_a_failing_step_gate_holds_without_rolling_back() -> None:
    """FAIL on a step gate (not a trigger) keeps the step running and moves no traffic."""
    world = at_first_canary()
    world.wait(HOUR)
    decision = world.tick(step_gates(world, Verdict.PASS, queue_timeouts=Verdict.FAIL))
    assert decision.state is State.RUNNING
    assert decision.progress.rollback is None
    assert weights_set(world.last) == []


def test_a_breach_on_a_step_gate_starts_the_rollback() -> None:
    """BREACH on a step gate rolls back at once, naming the gate."""
    world = at_first_canary()
    world.wait(HOUR)
    decision = world.tick(step_gates(world, Verdict.PASS, queue_timeouts=Verdict.BREACH))
    assert decision.state is State.ROLLING_BACK
    assert weights_set(world.last) == [(_desired_key(decision), 0)]
    assert decision.progress.rollback is not None
    assert decision.progress.rollback.gate == "queue_timeouts"
    assert "rollback_started" in alert_topics(decision.actions)


@pytest.mark.parametrize("verdict", [Verdict.FAIL, Verdict.BREACH])
@pytest.mark.parametrize("step", range(6))
def test_a_failing_rollback_trigger_rolls_back_at_every_step(step: int, verdict: Verdict) -> None:
    """FAIL or BREACH of a trigger rolls back at shadow, canary, pause, full and steady alike."""
    world = World(example_plan()).reach(step)
    world.wait(MINUTE)
    decision = world.tick(results(world.now, {"canary_oom": verdict}))
    assert decision.state is State.ROLLING_BACK
    assert decision.progress.rollback is not None
    assert decision.progress.rollback.gate == "canary_oom"
    assert weights_set(world.last) == [(_desired_key(decision), 0)]


def test_a_failing_rollback_trigger_rolls_back_while_operator_paused() -> None:
    """An operator pause does not stop the triggers: a FAIL still rolls back."""
    world = at_first_canary()
    world.tick(commands=[command("pause")])
    assert world.state is State.PAUSED
    world.wait(MINUTE)
    decision = world.tick(results(world.now, {"exactness_drop": Verdict.FAIL}))
    assert decision.state is State.ROLLING_BACK
    assert decision.progress.paused is None


def test_a_trigger_result_from_before_the_rollout_started_is_ignored() -> None:
    """A breach evaluated before the rollout started is old news and does not roll back."""
    world = World(example_plan())
    world.tick()
    world.wait(MINUTE)
    stale = {"canary_oom": GateResult(Verdict.BREACH, T0 - timedelta(seconds=1))}
    assert world.tick(stale).state is State.RUNNING


def test_the_trigger_blamed_for_a_rollback_does_not_depend_on_the_hash_seed() -> None:
    """With every trigger breaching, every interpreter blames the same one: the first listed."""
    script = textwrap.dedent(
        """
        from datetime import timedelta
        from rolloutd.core.actions import Verdict
        from tests.plans import World, every_gate, example_plan
        world = World(example_plan()).reach(1)
        world.wait(timedelta(minutes=1))
        print(world.tick(every_gate(world.plan, Verdict.BREACH, world.now)).progress.rollback.gate)
        """
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    blamed = {run.communicate(timeout=60)[0].strip() for run in runs}
    assert blamed == {"queue_timeouts_breach"}


# --- abort and rollback ---------------------------------------------------------------------


def test_abort_starts_the_rollback_with_weight_zero() -> None:
    """Abort sets weight 0 under the rollback key and reports ``rolling_back``."""
    world = at_first_canary()
    before = world.progress
    decision = world.tick(commands=[command("abort")])
    assert decision.state is State.ROLLING_BACK
    assert attempted(before, decision) == [
        SetWeight(_desired_key(decision), 0, False, decision.progress.desired.generation)
    ]
    assert [o.applied for o in decision.outcomes] == [True]


def test_a_rollback_is_not_finished_in_the_tick_that_starts_it() -> None:
    """Even with the router already at 0 (shadow), the rollback waits for its own action."""
    world = World(example_plan()).reach(0)
    assert world.router_weight == 0
    decision = world.tick(commands=[command("abort")])
    assert decision.state is State.ROLLING_BACK


def test_a_rollback_ends_only_when_its_action_is_done_and_the_router_reads_zero() -> None:
    """Without an executor: action done but router still at 5%: rolling back; router at 0:
    rolled back."""
    world = at_first_canary(traffic_only_example_plan())
    world.lag = 1
    world.tick(commands=[command("abort")])
    world.wait(MINUTE)
    assert world.tick().state is State.ROLLING_BACK
    assert world.router_weight == 5
    world.wait(MINUTE)
    decision = world.tick()
    assert world.router_weight == 0
    assert decision.state is State.ROLLED_BACK
    assert decision.progress.ended_at == world.now


def test_a_rollback_does_not_end_while_the_router_reads_above_zero() -> None:
    """The router never takes the rollback's 0%: the rollout stays rolling back."""
    world = at_first_canary()
    world.lag = None
    world.tick(commands=[command("abort")])
    world.wait(HOUR)
    decision = world.tick()
    assert world.router_weight == 5
    assert decision.state is State.ROLLING_BACK


# --- how a rollback ends -----------------------------------------------------------------------


def _ended(decision: Decision) -> Event:
    """The decision's one ``rolled_back`` event."""
    (event,) = [e for e in decision.events if e.kind == "rolled_back"]
    return event


def test_a_rollback_without_an_executor_ends_traffic_only_and_says_so() -> None:
    """At the router's 0% the rollback ends with the outcome ``traffic_only`` and the plan's
    reason stored; its event and its alert (a warning: the canary build is still on the
    replicas) say so, and people read ``rolled_back (traffic only: no executor)``."""
    world = at_first_canary(traffic_only_example_plan())
    world.tick(commands=[command("abort")])
    decision = world.tick()
    assert decision.state is State.ROLLED_BACK
    rollback = decision.progress.rollback
    assert rollback is not None
    assert (rollback.outcome, rollback.no_executor_reason) == (
        "traffic_only",
        NO_EXECUTOR["reason"],
    )
    event = _ended(decision)
    assert event.detail.startswith("rollback finished (traffic only: no executor): ")
    assert f"no executor because: {NO_EXECUTOR['reason']}" in event.detail
    assert event.data == {"rollback": "traffic_only", "no_executor_reason": NO_EXECUTOR["reason"]}
    (alert,) = [a for a in decision.actions if isinstance(a, Alert)]
    assert (alert.topic, alert.severity, alert.text) == ("rolled_back", "warning", event.detail)
    assert not [a for a in world.actions if isinstance(a, Deploy | Verify)]
    shown = shown_state(decision.state, rollback_outcome(decision.progress))
    assert shown == "rolled_back (traffic only: no executor)"


def test_a_staging_plan_without_an_executor_also_ends_traffic_only() -> None:
    """No ``executor`` section outside production: the same outcome, with no reason to give."""
    world = World(small_plan()).reach(2)
    world.tick(commands=[command("abort")])
    decision = world.tick()
    assert decision.state is State.ROLLED_BACK
    assert rollback_outcome(decision.progress) == "traffic_only"
    assert _ended(decision).data == {"rollback": "traffic_only", "no_executor_reason": None}
    assert "because" not in _ended(decision).detail


def test_a_rollback_with_an_executor_ends_verified_after_the_redeploy_and_verification() -> None:
    """Router at 0, then the canary replica redeployed, then verified: the outcome ``verified``,
    and the state reads plain ``rolled_back``."""
    world = at_first_canary()
    world.tick(commands=[command("abort")])
    states = [world.tick().state for _ in range(3)]
    assert states == [State.ROLLING_BACK, State.ROLLING_BACK, State.ROLLED_BACK]
    assert [type(a) for a in world.actions if isinstance(a, Deploy | Verify)] == [Deploy, Verify]
    decision = world.decisions[-1]
    assert rollback_outcome(decision.progress) == "verified"
    assert _ended(decision).data == {"rollback": "verified"}
    assert shown_state(decision.state, rollback_outcome(decision.progress)) == "rolled_back"


def test_a_verified_rollback_waits_for_the_router_to_read_zero_again() -> None:
    """A late write put 5% back while the replica was redeployed: the rollback holds in
    rolling_back until the router reads 0 again."""
    world = at_first_canary()
    world.tick(commands=[command("abort")])
    world.tick()
    world.tick()
    world.router_weight = 5
    assert world.tick().state is State.ROLLING_BACK
    world.router_weight = 0
    assert world.tick().state is State.ROLLED_BACK


@pytest.mark.parametrize("kind", ["promote", "pause", "resume", "abort"])
def test_commands_are_rejected_while_rolling_back(kind: CommandKind) -> None:
    """Once rolling back, every command is rejected with the reason."""
    world = at_first_canary()
    world.lag = None
    world.tick(commands=[command("abort")])
    decision = world.tick(commands=[command(kind)])
    (outcome,) = decision.outcomes
    assert (outcome.applied, outcome.detail) == (False, "the rollout is rolling back")
    assert weights_set(world.last) == []


# --- promote --------------------------------------------------------------------------------


def test_reaching_a_pause_step_awaits_promotion_with_an_alert() -> None:
    """Entering the manual pause alerts and reports ``awaiting_promotion`` at 25%."""
    world = World(example_plan()).reach(2)
    world.wait(timedelta(hours=48))
    decision = world.tick(world.passing())
    assert decision.progress.step_index == 3
    assert decision.state is State.AWAITING_PROMOTION
    assert "awaiting_promotion" in alert_topics(decision.actions)
    assert weights_set(world.last) == [("weight@gen4=25", 25)]


def test_an_awaiting_promotion_step_waits_indefinitely_without_promote() -> None:
    """A month of passing gates does not end a manual pause."""
    world = World(example_plan()).reach(3)
    world.wait(timedelta(days=30))
    assert world.tick(world.passing()).state is State.AWAITING_PROMOTION


def test_promote_ends_an_awaiting_promotion_step() -> None:
    """Promote at the manual pause moves to the full step at 100%."""
    world = World(example_plan()).reach(3)
    decision = world.tick(commands=[command("promote")])
    assert [o.applied for o in decision.outcomes] == [True]
    assert decision.progress.step_index == 4
    assert weights_set(world.last) == [("weight@gen5=100", 100)]


def test_a_timed_pause_ends_by_itself_after_its_duration() -> None:
    """The small plan's 30m pause after shadow completes once 30m have passed."""
    world = World(small_plan()).reach(1)
    assert world.state is State.RUNNING
    world.wait(timedelta(minutes=29))
    assert world.tick().progress.step_index == 1
    world.wait(MINUTE)
    assert world.tick().progress.step_index == 2


def test_promote_on_a_canary_step_ends_the_bake_but_gates_must_still_pass() -> None:
    """A promoted canary completes before its bake once, and only once, its gates pass."""
    world = at_first_canary()
    world.wait(HOUR)
    decision = world.tick(step_gates(world, Verdict.PENDING), [command("promote")])
    assert [o.applied for o in decision.outcomes] == [True]
    assert decision.progress.step_index == 1
    world.wait(MINUTE)
    assert world.tick(step_gates(world, Verdict.PASS)).progress.step_index == 2


def test_promote_full_jumps_to_the_full_step() -> None:
    """``promote --full`` at 5% skips to the full step and asks for 100%."""
    world = at_first_canary()
    decision = world.tick(commands=[command("promote", full=True)])
    assert decision.progress.step_index == 4
    # Step 1 was the second generation; the jump is the third, not one per skipped step.
    assert weights_set(world.last) == [("weight@gen3=100", 100)]


def test_promote_full_at_the_full_step_is_rejected() -> None:
    """There is nothing to skip once the rollout is at its full step."""
    world = World(example_plan()).reach(4)
    decision = world.tick(commands=[command("promote", full=True)])
    (outcome,) = decision.outcomes
    assert not outcome.applied
    assert outcome.detail == "the rollout is already at or past its 'full' step"


def test_promote_while_paused_is_rejected() -> None:
    """A paused rollout must be resumed before it can be promoted."""
    world = at_first_canary()
    world.tick(commands=[command("pause")])
    decision = world.tick(commands=[command("promote")])
    (outcome,) = decision.outcomes
    assert (outcome.applied, outcome.detail) == (False, "the rollout is paused; resume it first")
    assert decision.progress.step_index == 1


def test_promote_late_in_a_bake_does_not_trip_the_progress_deadline() -> None:
    """Promoting 20h into a 48h bake (12h deadline) with a gate still pending does not roll back."""
    world = at_first_canary()
    world.wait(timedelta(hours=20))
    holding = step_gates(world, Verdict.PASS, queue_timeouts=Verdict.PENDING)
    decision = world.tick(holding, [command("promote")])
    assert decision.state is State.RUNNING


def test_after_a_promote_the_progress_deadline_runs_from_the_promotion() -> None:
    """Promoted at 20h of bake with a 12h deadline: held at 32h, rolled back just after."""
    world = at_first_canary()
    world.wait(timedelta(hours=20))
    world.tick(commands=[command("promote")])
    world.wait(timedelta(hours=12))
    holding = partial(step_gates, verdict=Verdict.PASS, queue_timeouts=Verdict.PENDING)
    assert_deadline_is_now(world, holding, "queue_timeouts")


# --- pause and resume -----------------------------------------------------------------------


def test_pause_and_resume_hold_and_continue_the_bake_clock() -> None:
    """A 48h bake paused for 10h completes at 58h of wall time, not before."""
    world = at_first_canary()
    verified = world.now
    world.wait(timedelta(hours=20))
    world.tick(commands=[command("pause")])
    world.wait(timedelta(hours=10))
    world.tick(commands=[command("resume")])
    world.wait(timedelta(hours=28) - timedelta(seconds=1))
    assert world.tick(step_gates(world, Verdict.PASS)).progress.step_index == 1
    world.wait(timedelta(seconds=1))
    assert world.now - verified == timedelta(hours=58)
    assert world.tick(step_gates(world, Verdict.PASS)).progress.step_index == 2


def test_an_operator_paused_step_does_not_complete() -> None:
    """With the bake elapsed and gates passing, a paused rollout stays where it is."""
    world = at_first_canary()
    world.wait(timedelta(hours=47))
    world.tick(commands=[command("pause")])
    world.wait(timedelta(days=5))
    decision = world.tick(step_gates(world, Verdict.PASS))
    assert (decision.state, decision.progress.step_index) == (State.PAUSED, 1)
    assert decision.progress.baked(world.now) == timedelta(hours=47)


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        ("pause", "pause", "the rollout is already paused"),
        (None, "resume", "the rollout is not paused (it is running)"),
    ],
)
def test_pause_twice_and_resume_when_running_are_rejected(
    first: CommandKind | None, second: CommandKind, why: str
) -> None:
    """A second pause, or a resume of a running rollout, is rejected with the reason."""
    world = at_first_canary()
    if first is not None:
        world.tick(commands=[command(first)])
    (outcome,) = world.tick(commands=[command(second)]).outcomes
    assert (outcome.applied, outcome.detail) == (False, why)


# --- inconclusive evaluations ---------------------------------------------------------------


def inconclusive_ticks(world: World, count: int, gate: str = "healthy") -> None:
    """``count`` fresh inconclusive evaluations of ``gate``, one minute apart."""
    for _ in range(count):
        world.wait(MINUTE)
        world.tick(results(world.now, {gate: Verdict.INCONCLUSIVE}))


def test_inconclusive_evaluations_up_to_the_limit_do_not_pause() -> None:
    """Three inconclusive evaluations in a row (the limit) leave the rollout running."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 3)
    assert world.state is State.RUNNING


def test_more_inconclusive_evaluations_than_the_limit_pause_with_an_alert() -> None:
    """The fourth inconclusive evaluation in a row pauses the rollout and alerts."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 4)
    assert world.state is State.PAUSED
    assert world.progress.paused == "inconclusive"
    (alert,) = [a for a in world.decisions[-1].actions if isinstance(a, Alert)]
    assert (alert.topic, alert.severity) == ("inconclusive_limit", "warning")


def test_the_same_inconclusive_evaluation_seen_twice_counts_once() -> None:
    """Ticks that see an evaluation already counted do not lengthen the streak."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 3)
    stale = results(world.now, {"healthy": Verdict.INCONCLUSIVE})
    for _ in range(5):
        world.wait(MINUTE)
        world.tick(stale)
    assert world.state is State.RUNNING
    assert world.progress.inconclusive_streaks["healthy"] == 3


def test_a_conclusive_evaluation_resets_the_inconclusive_streak() -> None:
    """A FAIL between inconclusive runs starts the count again."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 3)
    world.wait(MINUTE)
    world.tick(results(world.now, {"healthy": Verdict.FAIL}))
    inconclusive_ticks(world, 3)
    assert world.state is State.RUNNING


def test_inconclusive_rollback_trigger_evaluations_count_too() -> None:
    """A rollback trigger without data for too long pauses the rollout like a step gate."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 4, gate="crash")
    assert world.progress.paused == "inconclusive"


def test_too_many_inconclusive_with_on_inconclusive_rollback_rolls_back() -> None:
    """With ``on_inconclusive: rollback`` the limit starts a rollback instead of a pause."""
    world = World(small_plan(max_inconclusive=3, on_inconclusive="rollback")).reach(0)
    inconclusive_ticks(world, 4)
    assert world.state is State.ROLLING_BACK
    assert weights_set(world.last) == [(_desired_key(world.decisions[-1]), 0)]


def test_an_inconclusive_pause_lifts_by_itself_when_data_returns() -> None:
    """A conclusive evaluation after an inconclusive pause resumes the rollout without anyone."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 4)
    world.wait(MINUTE)
    decision = world.tick(results(world.now, {"healthy": Verdict.PASS}))
    assert decision.state is State.RUNNING
    assert decision.progress.paused is None


def test_an_operator_pause_does_not_lift_when_data_returns() -> None:
    """Data coming back after inconclusive evaluations leaves an operator's pause in place."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    world.tick(commands=[command("pause")])
    inconclusive_ticks(world, 4)
    world.wait(MINUTE)
    decision = world.tick(results(world.now, {"healthy": Verdict.PASS}))
    assert decision.state is State.PAUSED
    assert decision.progress.paused == "operator"


def test_an_inconclusive_pause_holds_the_bake_clock() -> None:
    """Time spent paused for missing data does not count towards the bake."""
    world = World(small_plan(max_inconclusive=3)).reach(0)
    inconclusive_ticks(world, 4)
    baked = world.progress.baked(world.now)
    world.wait(timedelta(hours=5))
    world.tick(results(world.now - HOUR, {"healthy": Verdict.INCONCLUSIVE}))
    assert world.progress.baked(world.now) == baked


# --- the progress deadline ------------------------------------------------------------------


def test_a_step_whose_gates_do_not_pass_within_the_deadline_after_its_bake_rolls_back() -> None:
    """Bake 48h + deadline 12h: still holding at 60h, rolled back just after, naming the gate."""
    world = at_first_canary()
    world.wait(timedelta(hours=60))
    failing = partial(step_gates, verdict=Verdict.PASS, queue_timeouts=Verdict.FAIL)
    assert_deadline_is_now(world, failing, "queue_timeouts")


def test_a_router_that_never_confirms_the_weight_within_the_deadline_rolls_back() -> None:
    """A router stuck at 5% makes step 2 (25%) roll back 12h after it was entered."""
    world = at_first_canary()
    world.lag = None
    world.wait(timedelta(hours=48))
    world.tick(step_gates(world, Verdict.PASS))
    entered = world.progress.step_entered_at
    assert (world.progress.step_index, entered) == (2, world.now)
    world.wait(timedelta(hours=12))
    assert_deadline_is_now(world, World.passing, "did not confirm 25% within 12h")
    assert world.router_weight == 5


def test_a_deadline_rollback_names_a_gate_whose_last_pass_predates_the_step() -> None:
    """A gate whose newest pass is older than the step's verification is named as the hold-up."""
    world = World(small_plan()).reach(0)
    verified = world.progress.step_verified_at
    assert verified is not None
    world.wait(timedelta(hours=7, seconds=1))  # shadow 1h + deadline 6h
    decision = world.tick(results(verified - MINUTE, {"healthy": Verdict.PASS}))
    assert decision.state is State.ROLLING_BACK
    assert decision.progress.rollback is not None
    assert "healthy" in decision.progress.rollback.cause


def test_without_a_deadline_a_failing_step_holds_forever() -> None:
    """With no progress deadline, a gate failing for a year holds the step without rollback."""
    world = World(small_plan()).reach(2)
    plan = world.plan.model_copy(
        update={"limits": world.plan.limits.model_copy(update={"progress_deadline": None})}
    )
    world.plan = plan
    world.wait(timedelta(days=365))
    decision = world.tick(step_gates(world, Verdict.FAIL))
    assert (decision.state, decision.progress.step_index) == (State.RUNNING, 2)


# --- terminal states ------------------------------------------------------------------------


def _terminal_worlds() -> dict[str, World]:
    completed = World(small_plan()).run_to_completion(timedelta(hours=3), 20)
    aborted, failed = World(example_plan()), World(example_plan())
    aborted.tick(commands=[command("abort")])
    failed.tick(preflight_error="no")
    return {
        "rolled_back": rolled_back_world(),
        "completed": completed,
        "aborted": aborted,
        "failed": failed,
    }


@pytest.mark.parametrize("ending", ["rolled_back", "completed", "aborted", "failed"])
def test_nothing_moves_a_terminal_rollout(ending: str) -> None:
    """Breaching gates, a month of time and every command leave a terminal rollout unchanged."""
    world = _terminal_worlds()[ending]
    assert world.state is State(ending)
    before = world.progress
    world.wait(timedelta(days=30))
    commands = [command(k) for k in ("promote", "pause", "resume", "abort")]
    commands.append(command("promote", full=True))
    decision = world.tick(every_gate_breaching(world), commands)
    assert decision.progress == before
    assert decision.actions == ()
    assert decision.state is State(ending)
    assert [o.applied for o in decision.outcomes] == [False] * 5
    assert all(f"the rollout has ended ({ending})" == o.detail for o in decision.outcomes)


def every_gate_breaching(world: World) -> dict[str, GateResult]:
    """Every gate of the plan breaching now."""
    return results(world.now, dict.fromkeys(world.plan.gates, Verdict.BREACH))


@pytest.mark.parametrize("kind", ["promote", "pause", "resume", "abort"])
def test_refusal_explains_that_a_rolled_back_rollout_has_ended(kind: str) -> None:
    """``refusal`` (what rolloutctl asks first) rejects every command after the end."""
    world = rolled_back_world()
    assert refusal(world.plan, world.progress, kind) == "the rollout has ended (rolled_back)"


# --- the whole way --------------------------------------------------------------------------


def test_the_example_plan_runs_to_completed_at_weight_100() -> None:
    """Shadow, 5%, 25%, promotion, full and a 7-day steady watch end ``completed`` at 100%."""
    world = World(example_plan()).run_to_completion(timedelta(hours=12), 40)
    assert world.state is State.COMPLETED
    assert world.router_weight == 100
    assert [w for _, w in weights_set(world.actions)] == [0, 5, 25, 25, 100, 100]
    assert world.progress.ended_at is not None
    assert world.progress.ended_at - T0 >= timedelta(hours=24 + 48 + 48, days=7)
    assert "completed" in alert_topics(world.actions)


# --- states and storage ---------------------------------------------------------------------


def test_state_of_is_derived_from_the_facts() -> None:
    """Pending, running, paused, awaiting promotion, rolling back and ended follow the facts."""
    plan = example_plan()
    started = Progress(started_at=T0, step_entered_at=T0)
    rollback = RollbackFacts("abort", T0)
    assert state_of(plan, Progress()) is State.PENDING
    assert state_of(plan, started) is State.RUNNING
    assert state_of(plan, replace(started, paused="operator")) is State.PAUSED
    assert state_of(plan, replace(started, step_index=3)) is State.AWAITING_PROMOTION
    assert state_of(plan, replace(started, rollback=rollback)) is State.ROLLING_BACK
    ended = replace(started, rollback=rollback, ended="rolled_back", ended_at=T0)
    assert state_of(plan, ended) is State.ROLLED_BACK


def _busy_progress() -> Progress:
    return Progress(
        started_at=T0,
        step_index=2,
        step_entered_at=T0 + HOUR,
        step_verified_at=T0 + 2 * HOUR,
        baked_seconds=1234.5,
        bake_mark=T0 + 3 * HOUR,
        promoted=True,
        promoted_after_seconds=600.0,
        paused="inconclusive",
        inconclusive_streaks={"queue_timeouts": 4, "canary_oom": 0},
        no_data_since={"queue_timeouts": T0 + 3 * HOUR},
        last_seen={"queue_timeouts": T0 + 4 * HOUR},
        extended=True,
        short_since=T0 + 4 * HOUR,
        rollback=RollbackFacts(
            "gate canary_oom breached",
            T0 + 5 * HOUR,
            gate="canary_oom",
            kind="trigger",
            outcome="traffic_only",
            no_executor_reason="the replicas are redeployed by hand",
        ),
        ended="rolled_back",
        ended_at=T0 + 6 * HOUR,
    )


@pytest.mark.parametrize("progress", [Progress(), _busy_progress()], ids=["fresh", "busy"])
def test_progress_round_trips_through_storage_and_json(progress: Progress) -> None:
    """``from_storage(for_storage())`` gives back equal progress, also after a JSON round trip."""
    stored = progress.for_storage()
    assert Progress.from_storage(stored) == progress
    assert Progress.from_storage(json.loads(json.dumps(stored))) == progress


def test_a_weight_key_names_the_generation_the_weight_and_mirroring() -> None:
    """A weight attempt's key names its fact's generation, the weight and the mirror."""
    assert Desired(0, True, 1).key == "weight@gen1=0+mirror"
    assert Desired(25, False, 7).key == "weight@gen7=25"


def _desired_key(decision: Decision) -> str:
    """The key of the attempt toward the decision's desired fact."""
    assert decision.progress.desired is not None
    return decision.progress.desired.key


def test_a_latency_gate_starved_of_samples_after_the_bake_counts_as_inconclusive() -> None:
    """Pending latency (too few samples) during the bake only waits; once the bake is over,
    each new pending evaluation counts toward the inconclusive limit and then pauses."""
    world = World(example_plan()).reach(2)  # canary 25%: where the example judges latency
    limit = world.plan.limits.max_inconclusive
    for _ in range(limit + 2):
        world.wait(MINUTE)
        world.tick(step_gates(world, Verdict.PASS, e2e_latency_p95=Verdict.PENDING))
    assert world.state is State.RUNNING
    world.wait(timedelta(hours=48))
    for _ in range(limit + 1):
        world.wait(MINUTE)
        world.tick(step_gates(world, Verdict.PASS, e2e_latency_p95=Verdict.PENDING))
    assert world.progress.paused == "inconclusive"
    assert "inconclusive_limit" in alert_topics(world.actions)


# --- missing data, per gate -----------------------------------------------------------------


def small_world(on_inconclusive: str = "pause", **rules: object) -> World:
    """The small plan (limit 3) at its shadow step, each gate in ``rules`` with that
    ``on_no_data``."""
    data = small_dict()
    data["limits"]["on_inconclusive"] = on_inconclusive
    for gate, rule in rules.items():
        data["gates"][gate]["on_no_data"] = rule
    return World(plan_of(data)).reach(0)


def test_a_gate_that_holds_pauses_even_where_the_plan_rolls_back() -> None:
    """``on_no_data: hold`` pauses past the limit under ``on_inconclusive: rollback``, and the
    pause lifts when the data returns."""
    world = small_world("rollback", healthy="hold")
    inconclusive_ticks(world, 4)
    assert (world.state, world.progress.paused) == (State.PAUSED, "inconclusive")
    world.wait(MINUTE)
    assert world.tick(results(world.now, {"healthy": Verdict.PASS})).state is State.RUNNING


def test_a_gate_that_rolls_back_does_so_where_the_plan_holds() -> None:
    """``on_no_data: rollback`` rolls back past the limit under ``on_inconclusive: pause``,
    naming the gate, with the rollback classified as no_data."""
    world = small_world(healthy="rollback")
    inconclusive_ticks(world, 3)
    assert world.state is State.RUNNING
    inconclusive_ticks(world, 1)
    rollback = world.progress.rollback
    assert world.state is State.ROLLING_BACK and rollback is not None
    assert (rollback.kind, rollback.gate) == ("no_data", "healthy")
    assert "healthy: more than 3 inconclusive evaluations in a row" in rollback.cause


def test_rollback_after_holds_then_rolls_back_once_the_gate_went_that_long_without_data() -> None:
    """``rollback_after: 30m`` pauses at the limit, and rolls back 30 minutes (the pause
    included) after the streak's first inconclusive evaluation, not before."""
    world = small_world(healthy={"rollback_after": "30m"})
    inconclusive_ticks(world, 1)
    first = world.now
    inconclusive_ticks(world, 3)
    assert world.progress.paused == "inconclusive"
    while world.now < first + timedelta(minutes=29):
        inconclusive_ticks(world, 1)
        assert world.state is State.PAUSED
    inconclusive_ticks(world, 1)
    assert world.now - first == timedelta(minutes=30)
    rollback = world.progress.rollback
    assert world.state is State.ROLLING_BACK and rollback is not None
    assert rollback.kind == "no_data" and "without data for 30m" in rollback.cause


def test_rollback_after_runs_out_with_no_evaluation_at_all() -> None:
    """The clock is ``now``: a gate that stops being evaluated once paused still rolls back."""
    world = small_world(healthy={"rollback_after": "30m"})
    inconclusive_ticks(world, 4)
    world.wait(timedelta(minutes=26))
    assert world.tick().state is State.PAUSED
    world.wait(MINUTE)
    assert world.tick().state is State.ROLLING_BACK


def test_a_conclusive_evaluation_restarts_the_rollback_after_clock() -> None:
    """Data that comes back for a moment lifts the hold; the next streak counts from its own
    first inconclusive evaluation."""
    world = small_world(healthy={"rollback_after": "30m"})
    inconclusive_ticks(world, 4)
    world.wait(timedelta(minutes=20))
    world.tick(results(world.now, {"healthy": Verdict.FAIL}))
    assert world.state is State.RUNNING
    inconclusive_ticks(world, 1)
    second = world.now
    inconclusive_ticks(world, 3)
    world.wait(second + timedelta(minutes=29) - world.now)
    assert world.tick().state is State.PAUSED
    world.wait(MINUTE)
    assert world.tick().state is State.ROLLING_BACK


def test_an_operator_pause_keeps_missing_data_from_pausing_or_rolling_back() -> None:
    """While an operator holds the rollout, a gate that rolls back on missing data does not."""
    world = small_world(healthy="rollback")
    world.tick(commands=[command("pause")])
    inconclusive_ticks(world, 6)
    assert (world.state, world.progress.paused) == (State.PAUSED, "operator")


def test_a_gate_on_hold_and_one_on_rollback_after_hold_together_until_the_second_runs_out() -> None:
    """Two gates without data: the rollout holds for both, and rolls back when the one with
    ``rollback_after`` runs out, naming it."""
    world = small_world(healthy="hold", crash={"rollback_after": "1h"})
    for _ in range(4):
        world.wait(MINUTE)
        world.tick(results(world.now, dict.fromkeys(("healthy", "crash"), Verdict.INCONCLUSIVE)))
    assert world.state is State.PAUSED
    world.wait(timedelta(minutes=57))
    world.tick()
    rollback = world.progress.rollback
    assert rollback is not None and (rollback.gate, rollback.kind) == ("crash", "no_data")


def sampled_world(
    min_samples: dict[str, int] | None = None, max_extension: str | None = None, **rules: object
) -> World:
    """The small plan at its canary step (10%, bake 2h, deadline 6h), asking ``min_samples``
    of its gates (default: 500 of ``fast``), gates in ``rules`` with that ``on_no_data``."""
    data = small_dict()
    step = data["steps"][2]
    step["min_samples"] = min_samples or {"fast": 500}
    if max_extension is not None:
        step["max_extension"] = max_extension
    for gate, rule in rules.items():
        data["gates"][gate]["on_no_data"] = rule
    return World(plan_of(data)).reach(2)


def short_after_the_bake(**rules: object) -> World:
    """A sampled world with a 1h extension whose 2h bake ended with 120 of the 500 samples
    ``fast`` needs (the step is extended from here); gates in ``rules`` as in
    :func:`sampled_world`."""
    world = sampled_world(max_extension="1h", **rules)
    world.wait(timedelta(hours=2))
    world.tick(sampled(world, 120))
    return world


def state_after(world: World, delta: timedelta, fast: int = 120) -> State:
    """The state of a tick after ``delta`` more, ``fast`` resting on ``fast`` samples."""
    world.wait(delta)
    return world.tick(sampled(world, fast)).state


def sampled(
    world: World, fast: int | None, verdict: Verdict = Verdict.PASS
) -> dict[str, GateResult]:
    """The canary step's gates passing now, ``fast`` (with ``verdict``) on ``fast`` samples."""
    return {
        "healthy": GateResult(Verdict.PASS, world.now, samples=PLENTY),
        "fast": GateResult(verdict, world.now, samples=fast),
    }


def events_of(world: World, kind: str) -> list[Event]:
    """Every event of ``kind`` the world's decisions made, in order."""
    return [e for d in world.decisions for e in d.events if e.kind == kind]


def test_a_step_short_of_samples_when_its_bake_ends_is_extended_once_then_completes() -> None:
    """At the end of the bake with 120 of 500 samples the step is extended (one event, one
    warning), and completes as soon as the samples are there."""
    world = sampled_world()
    world.wait(timedelta(hours=2))
    decision = world.tick(sampled(world, 120))
    assert (decision.state, decision.progress.step_index) == (State.RUNNING, 2)
    (extended,) = [e for e in decision.events if e.kind == "step_extended"]
    assert extended.data["gates"] == {"fast": {"samples": 120, "needed": 500}}
    assert "extended by up to 2h" in extended.detail
    (alert,) = [a for a in decision.actions if isinstance(a, Alert)]
    assert (alert.topic, alert.severity) == ("step_extended", "warning")
    for _ in range(3):
        world.wait(timedelta(minutes=10))
        world.tick(sampled(world, 480))
    assert len(events_of(world, "step_extended")) == 1
    world.wait(timedelta(minutes=10))
    assert world.tick(sampled(world, 500)).progress.step_index == 3


def test_a_step_with_enough_samples_at_the_end_of_its_bake_is_not_extended() -> None:
    """500 of 500 samples at the end of the bake: the step completes, no extension."""
    world = sampled_world()
    world.wait(timedelta(hours=2))
    assert world.tick(sampled(world, 500)).progress.step_index == 3
    assert events_of(world, "step_extended") == []


@pytest.mark.parametrize("samples", [None, 0], ids=["uncounted", "zero"])
def test_an_idle_endpoint_never_passes_a_step_that_counts_samples(samples: int | None) -> None:
    """Passing verdicts on no traffic for a month: the step is extended, then held, never
    completed."""
    world = sampled_world()
    for _ in range(30):
        world.wait(timedelta(days=1))
        decision = world.tick(sampled(world, samples))
        assert decision.progress.step_index == 2
    assert world.progress.paused == "inconclusive"
    assert [e.kind for e in events_of(world, "step_extended")] == ["step_extended"]


def test_a_pass_from_before_the_step_was_reached_counts_no_samples() -> None:
    """Samples behind an evaluation older than the step's verification do not count."""
    world = sampled_world()
    verified = world.progress.step_verified_at
    assert verified is not None
    world.wait(timedelta(hours=2))
    stale = sampled(world, PLENTY)
    stale["fast"] = GateResult(Verdict.PASS, verified - MINUTE, samples=PLENTY)
    assert world.tick(stale).progress.step_index == 2


def test_a_step_still_short_after_its_extension_holds_and_resumes_when_samples_arrive() -> None:
    """Extension 1h: at 3h of bake still short, the rollout pauses (the bake clock stops) with
    a warning; the samples arriving days later lift the pause and complete the step."""
    world = short_after_the_bake()
    world.wait(timedelta(minutes=59))
    assert world.tick(sampled(world, 300)).state is State.RUNNING
    world.wait(MINUTE)
    decision = world.tick(sampled(world, 300))
    assert (decision.state, decision.progress.paused) == (State.PAUSED, "inconclusive")
    (paused,) = [e for e in decision.events if e.kind == "paused"]
    assert paused.data == {"cause": "no_data", "gates": ["fast"]}
    assert "fast: 300 samples of the 500 the step needs" in paused.detail
    assert "inconclusive_limit" in alert_topics(decision.actions)
    world.wait(timedelta(days=3))
    assert world.tick(sampled(world, 499)).state is State.PAUSED
    assert world.progress.baked(world.now) == timedelta(hours=3)
    world.wait(MINUTE)
    decision = world.tick(sampled(world, 500))
    assert (decision.state, decision.progress.step_index) == (State.RUNNING, 3)


def test_a_step_still_short_after_its_extension_rolls_back_when_its_gate_says_so() -> None:
    """``on_no_data: rollback`` on the short gate: at the end of the extension, roll back."""
    world = short_after_the_bake(fast="rollback")
    world.wait(timedelta(hours=1))
    rollback = world.tick(sampled(world, 120)).progress.rollback
    assert rollback is not None and (rollback.kind, rollback.gate) == ("no_data", "fast")
    assert "fast: 120 samples of the 500 the step needs" in rollback.cause


def test_rollback_after_on_short_samples_counts_from_the_end_of_the_extension() -> None:
    """``rollback_after: 2h`` on the short gate: held from the end of the extension (3h of
    bake) and rolled back two hours later (the hold included)."""
    world = short_after_the_bake(fast={"rollback_after": "2h"})
    assert state_after(world, timedelta(hours=1)) is State.PAUSED
    assert state_after(world, timedelta(hours=2) - MINUTE) is State.PAUSED
    assert state_after(world, MINUTE) is State.ROLLING_BACK


def test_the_extension_defaults_to_the_bake() -> None:
    """Without ``max_extension`` a 2h bake waits up to 2h more for samples."""
    world = sampled_world()
    assert state_after(world, timedelta(hours=4) - MINUTE) is State.RUNNING
    assert state_after(world, MINUTE) is State.PAUSED


def test_a_promoted_step_still_needs_its_samples() -> None:
    """Promoting ends the bake but not the need for samples: the step is extended from there."""
    world = sampled_world()
    world.wait(timedelta(minutes=30))
    decision = world.tick(sampled(world, 120), [command("promote")])
    assert decision.progress.step_index == 2
    assert "step_extended" in [e.kind for e in decision.events]
    world.wait(MINUTE)
    assert world.tick(sampled(world, 500)).progress.step_index == 3


def test_the_progress_deadline_of_an_extended_step_runs_from_the_end_of_its_extension() -> None:
    """Bake 2h, extension 1h, deadline 6h: a gate that fails after the samples came rolls the
    step back once 9h of bake have passed, not at 8h."""
    world = short_after_the_bake()
    world.wait(timedelta(hours=6, minutes=30))
    assert world.tick(sampled(world, 600, Verdict.FAIL)).state is State.RUNNING
    world.wait(timedelta(minutes=31))
    rollback = world.tick(sampled(world, 600, Verdict.FAIL)).progress.rollback
    assert rollback is not None and rollback.kind == "deadline"
    assert "did not pass fast" in rollback.cause


def test_a_latency_gate_the_step_counts_samples_for_is_not_starved_during_the_extension() -> None:
    """A latency gate pending for want of samples after the bake counts as inconclusive only
    once the step's extension for it ran out."""
    world = sampled_world()
    world.wait(timedelta(hours=2))
    for _ in range(10):
        world.wait(MINUTE)
        world.tick(sampled(world, 100, Verdict.PENDING))
    assert world.state is State.RUNNING
    assert world.progress.inconclusive_streaks.get("fast", 0) == 0


# --- what started a rollback ------------------------------------------------------------


def _rolled_back_by(how: str) -> World:
    """The example rollout at its first canary, rolled back by ``how``."""
    world = at_first_canary()
    world.wait(MINUTE)
    if how == "abort":
        world.tick(commands=[command("abort")])
    elif how == "trigger":
        world.tick(results(world.now, {"canary_oom": Verdict.BREACH}))
    elif how == "gate":
        world.tick(step_gates(world, Verdict.PASS, queue_timeouts=Verdict.BREACH))
    elif how == "deadline":
        world.wait(timedelta(hours=60, seconds=1))
        world.tick(step_gates(world, Verdict.PASS, queue_timeouts=Verdict.FAIL))
    return world


@pytest.mark.parametrize("kind", ["abort", "trigger", "gate", "deadline"])
def test_every_rollback_records_what_started_it(kind: str) -> None:
    """The rollback facts and the rollback_started event both carry the kind of cause."""
    world = _rolled_back_by(kind)
    rollback = world.progress.rollback
    assert rollback is not None and rollback.kind == kind
    (started,) = events_of(world, "rollback_started")
    assert started.data["cause"] == kind
    assert rollback_kind(world.plan.rollback.triggers, rollback) == kind


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        (RollbackFacts("aborted by alice: tool args look wrong", T0), "abort"),
        (RollbackFacts("gate canary_oom breached", T0, gate="canary_oom"), "trigger"),
        (RollbackFacts("gate queue_timeouts breached", T0, gate="queue_timeouts"), "gate"),
        (RollbackFacts("the router did not confirm 25% within 12h", T0), "deadline"),
        (
            RollbackFacts("canary 5% did not pass queue_timeouts within 12h after its bake", T0),
            "deadline",
        ),
        (RollbackFacts("healthy: more than 3 inconclusive evaluations in a row", T0), "no_data"),
    ],
)
def test_a_rollback_stored_before_it_was_classified_is_classified_by_its_cause(
    facts: RollbackFacts, kind: str
) -> None:
    """Progress written without the rollback's kind loads, and its kind is read from the cause."""
    stored = replace(_busy_progress(), rollback=facts).for_storage()
    assert stored["rollback"] is not None
    del stored["rollback"]["kind"]
    loaded = Progress.from_storage(stored).rollback
    assert loaded == facts and loaded.kind is None
    assert rollback_kind(example_plan().rollback.triggers, loaded) == kind


def test_progress_stored_before_missing_data_was_per_gate_loads() -> None:
    """Progress without the no-data facts loads with none of them."""
    stored = _busy_progress().for_storage()
    for key in ("no_data_since", "extended", "short_since"):
        del stored[key]
    loaded = Progress.from_storage(stored)
    assert (loaded.no_data_since, loaded.extended, loaded.short_since) == ({}, False, None)
