"""Property tests for rolloutd.core.machine: invariants over random runs of ticks.

A run is a plan, a router that reads weights back some ticks late, and a list of ticks.
Each tick moves the clock by seconds to days, brings verdicts for the gates (all passing,
random, or no data at all) and maybe operator commands. The invariants must hold after
every tick of every run.

Hypothesis draws each run's ticks as one byte string, a fixed number of bytes per tick,
which keeps generation cheap enough for hundreds of runs a second and still shrinks well:
towards fewer ticks, and towards zero bytes, which decode to the quietest tick.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutd.core.actions import Command, CommandKind, GateResult, Verdict
from rolloutd.core.machine import Decision, state_of
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress, State
from tests.plans import (
    PLENTY,
    SetWeight,
    World,
    attempted,
    command,
    every_gate,
    example_plan,
    plan_of,
    results,
    small_dict,
    small_plan,
)


def _sampled_plan() -> Plan:
    """The small plan whose canary step counts samples, with a rule of each kind for missing
    data: hold, rollback, and rollback after a while."""
    data = small_dict()
    data["steps"][2].update(min_samples={"fast": 500, "healthy": 200}, max_extension="1h")
    data["gates"]["healthy"]["on_no_data"] = "hold"
    data["gates"]["fast"]["on_no_data"] = {"rollback_after": "2h"}
    data["gates"]["crash"]["on_no_data"] = "rollback"
    return plan_of(data)


PLANS = {
    "example": example_plan(),
    "small": small_plan(),
    "small-rollback-on-inconclusive": small_plan(max_inconclusive=2, on_inconclusive="rollback"),
    "small-min-samples": _sampled_plan(),
}
MAX_GATES = max(len(plan.gates) for plan in PLANS.values())
NO_DATA = (Verdict.INCONCLUSIVE, Verdict.PENDING)
RUNS = settings(max_examples=300, deadline=None)

# Moods: calm, every gate passes now; noisy, any verdict for the step's gates while the
# triggers pass; alarm, any verdict for the triggers; dark, no data for any gate.
CLIMATES = {
    "fair": ["calm"] * 7 + ["noisy"] * 2 + ["dark"],
    "stormy": ["calm"] * 4 + ["noisy"] * 3 + ["dark"] * 2 + ["alarm"],
    "blackout": ["calm"] * 2 + ["noisy"] + ["dark"] * 7,
}
ADVANCES = [
    timedelta(seconds=n)
    for n in (1, 5, 30, 299, 1800, 3599, 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400 - 1, 4 * 86400)
]
# One byte per gate: the low 4 bits pick the verdict, bits 4-5 (both set) make it a day old,
# bits 6-7 the samples it rests on.
_CODES: list[Verdict | None] = [
    *[Verdict.PASS] * 8,
    *[Verdict.FAIL] * 2,
    Verdict.BREACH,
    *[Verdict.INCONCLUSIVE] * 3,
    Verdict.PENDING,
    None,  # no evaluation of the gate at all
]
_SAMPLES: list[int | None] = [PLENTY, PLENTY, None, 300]
# One byte per command slot, two slots a tick: mostly empty, aborts rare, so long runs happen.
_SLOTS: list[tuple[CommandKind, bool] | None] = [
    *[None] * 104,
    *[("promote", False)] * 8,
    *[("promote", True)] * 2,
    *[("pause", False)] * 6,
    *[("resume", False)] * 7,
    ("abort", False),
]
TICK_BYTES = 4 + MAX_GATES  # advance, mood, two command slots, the gates


@dataclass(frozen=True)
class Tick:
    """One tick of a run: how long since the last, what the gates said, what operators sent."""

    advance: timedelta
    mood: str
    codes: bytes  # one per gate in name order, see _CODES
    commands: tuple[tuple[CommandKind, bool], ...]

    @classmethod
    def decode(cls, chunk: bytes, climate: str) -> Tick:
        """The tick that ``TICK_BYTES`` bytes stand for under ``climate``."""
        moods = CLIMATES[climate]
        slots = (_SLOTS[chunk[2] % len(_SLOTS)], _SLOTS[chunk[3] % len(_SLOTS)])
        return cls(
            advance=ADVANCES[chunk[0] % len(ADVANCES)],
            mood=moods[chunk[1] % len(moods)],
            codes=chunk[4:],
            commands=tuple(c for c in slots if c is not None),
        )

    def results(self, plan: Plan, now: datetime) -> dict[str, GateResult]:
        """The gate results this tick brings, evaluated now or a day ago."""
        if self.mood == "calm":
            return every_gate(plan, Verdict.PASS, now, samples=PLENTY)
        triggers = set(plan.rollback.triggers)
        out = {}
        for name, code in zip(sorted(plan.gates), self.codes, strict=False):
            verdict = _CODES[code & 15]
            at = now - timedelta(days=int(code & 48 == 48))
            if self.mood == "dark":
                if verdict is not None and verdict is not Verdict.PENDING:
                    verdict = Verdict.INCONCLUSIVE
            elif (self.mood == "noisy") == (name in triggers):
                verdict = Verdict.PASS  # noisy spares the triggers, alarm the step gates
            if verdict is not None:
                out[name] = GateResult(verdict, at, samples=_SAMPLES[code >> 6])
        return out

    def operator_commands(self) -> list[Command]:
        """The commands this tick brings, with fresh ids."""
        return [command(kind, full=full) for kind, full in self.commands]


@dataclass(frozen=True)
class Run:
    """A plan, a router that reads weights back ``lag`` ticks late, and the ticks to play."""

    plan_name: str
    climate: str
    lag: int
    ticks: tuple[Tick, ...]

    @property
    def plan(self) -> Plan:
        """The plan the run follows."""
        return PLANS[self.plan_name]


def _run(plan_name: str, climate: str, lag: int, length: int, data: bytes) -> Run:
    chunks = [data[i * TICK_BYTES : (i + 1) * TICK_BYTES] for i in range(length)]
    return Run(plan_name, climate, lag, tuple(Tick.decode(c, climate) for c in chunks))


MAX_TICKS = 40
runs = st.builds(
    _run,
    plan_name=st.sampled_from(sorted(PLANS)),
    climate=st.sampled_from(sorted(CLIMATES)),
    lag=st.sampled_from([0, 0, 1, 2, 3]),
    length=st.integers(10, MAX_TICKS),
    # Fixed-size bytes cost hypothesis one draw; variable-size ones cost a draw per byte.
    data=st.binary(min_size=MAX_TICKS * TICK_BYTES, max_size=MAX_TICKS * TICK_BYTES),
)


@dataclass(frozen=True)
class Played:
    """One tick as played: the progress before it, what went in and what came out."""

    before: Progress
    tick: Tick
    verdicts: dict[str, GateResult]
    commands: list[Command]
    decision: Decision


def play(world: World, run: Run) -> Iterator[Played]:
    """Play the ticks of ``run`` against ``world``, yielding each tick as it happens."""
    for tick in run.ticks:
        world.wait(tick.advance)
        verdicts = tick.results(world.plan, world.now)
        commands = tick.operator_commands()
        before = world.progress
        yield Played(before, tick, verdicts, commands, world.tick(verdicts, commands))


def make_faithful(world: World) -> None:
    """From now on the router reads back every weight on the next tick."""
    world.lag = 0
    world.in_flight = [(0, weight) for _, weight in world.in_flight]


def set_weights(played: Played) -> list[SetWeight]:
    """The weight the played tick has the shell attempt (its new desired fact)."""
    return attempted(played.before, played.decision)


@RUNS
@given(runs)
def test_no_set_weight_exceeds_the_current_step_weight_and_rollbacks_set_zero(run: Run) -> None:
    """Every weight asked for is at most the step's weight after the tick; rollbacks ask for 0;
    the one attempt a tick makes serves the desired fact it ends with, a newer generation."""
    for played in play(World(run.plan, lag=run.lag), run):
        after = played.decision.progress
        before_generation = played.before.desired.generation if played.before.desired else 0
        if after.desired is not None:
            assert after.desired.generation >= before_generation
        attempts = set_weights(played)
        assert len(attempts) <= 1
        for action in attempts:
            assert after.desired is not None
            assert (action.key, action.weight) == (after.desired.key, after.desired.weight)
            assert after.desired.generation > before_generation
            if after.rollback is not None:
                assert action.weight == 0
            else:
                assert action.weight <= run.plan.step_weight(after.step_index)


def rollback_ticks(plan: Plan) -> int:
    """Ticks from a rollback's start to its end with a faithful router: one to read 0 back,
    and with an executor one to redeploy the canary replicas and one to verify them."""
    return 1 if plan.executor.kind == "none" else 3


@RUNS
@given(runs)
def test_once_a_rollback_starts_only_weight_zero_is_set_until_rolled_back(run: Run) -> None:
    """After a rollback starts only 0 is set; it ends once the router reads 0 (and every
    canary replica was redeployed and verified, where the plan has an executor), not before."""
    world = World(run.plan, lag=run.lag)
    started_at_tick = None
    for number, played in enumerate(play(world, run)):
        if played.decision.progress.ended == "rolled_back" and played.before.ended is None:
            assert world.router_weight == 0  # what the router read at this tick
        if started_at_tick is not None:
            assert all(a.weight == 0 for a in set_weights(played))
            if run.lag == 0 and number - started_at_tick >= rollback_ticks(run.plan):
                assert played.decision.state is State.ROLLED_BACK
        elif played.decision.progress.rollback is not None:
            started_at_tick = number
    make_faithful(world)
    for _ in range(1 + rollback_ticks(run.plan)):
        world.tick()
    if started_at_tick is not None:
        assert (world.state, world.router_weight) == (State.ROLLED_BACK, 0)


@RUNS
@given(runs, st.sampled_from(["abort", "trigger-breach", "trigger-fail", "step-gate-breach"]))
def test_every_abort_or_breach_after_the_start_ends_rolled_back_at_weight_zero(
    run: Run, ending: str
) -> None:
    """Whatever happened before, an abort or a breach ends ``rolled_back`` with the router at 0."""
    world = World(run.plan, lag=run.lag)
    for _ in play(world, run):
        pass
    if world.state in (State.COMPLETED, State.ABORTED):
        return  # finished, or aborted before it started: there is nothing to roll back
    make_faithful(world)
    world.wait(timedelta(seconds=5))
    trigger = run.plan.rollback.triggers[0]
    step_gates = run.plan.gates_of(world.progress.step_index)
    if ending == "abort":
        world.tick(commands=[command("abort")])
    elif ending == "trigger-fail":
        world.tick(results(world.now, {trigger: Verdict.FAIL}))
    elif ending == "step-gate-breach" and step_gates:
        world.tick(results(world.now, {step_gates[0]: Verdict.BREACH}))
    else:
        world.tick(results(world.now, {trigger: Verdict.BREACH}))
    for _ in range(1 + rollback_ticks(run.plan)):
        world.wait(timedelta(seconds=5))
        world.tick()
    assert (world.state, world.router_weight) == (State.ROLLED_BACK, 0)


@RUNS
@given(runs)
def test_nothing_moves_a_rollout_in_a_terminal_state(run: Run) -> None:
    """In a terminal state a tick changes no fact, takes no action and rejects every command."""
    world = World(run.plan, lag=run.lag)
    for _ in play(world, run):
        pass
    make_faithful(world)
    world.tick(commands=[command("abort")])
    for _ in range(1 + rollback_ticks(run.plan)):
        world.tick()
    assert world.state.terminal
    for played in play(world, run):
        assert played.decision.progress == played.before
        assert played.decision.actions == ()
        assert not any(outcome.applied for outcome in played.decision.outcomes)


def _has_no_data(gates: tuple[str, ...], verdicts: dict[str, GateResult]) -> bool:
    """Whether every one of ``gates`` is inconclusive, pending or without any result."""
    return all(g not in verdicts or verdicts[g].verdict in NO_DATA for g in gates)


@RUNS
@given(runs, st.integers(0, 2**MAX_GATES - 1))
def test_inconclusive_or_pending_verdicts_never_advance_a_step(run: Run, pending: int) -> None:
    """A tick whose step gates are all inconclusive, pending or absent never completes the step."""
    world = World(run.plan, lag=run.lag)
    for played in play(world, run):
        gates = run.plan.gates_of(played.before.step_index)
        promoted = any(c.kind == "promote" for c in played.commands)
        if gates and not promoted and _has_no_data(gates, played.verdicts):
            assert played.decision.progress.step_index == played.before.step_index
    # Once more with the step's bake long over, so that only the verdicts can hold it.
    world.wait(timedelta(days=30))
    names = sorted(run.plan.gates)
    dark = results(world.now, {name: NO_DATA[(pending >> i) & 1] for i, name in enumerate(names)})
    before = world.progress.step_index
    assert world.tick(dark).progress.step_index == before or not run.plan.gates_of(before)


@RUNS
@given(runs)
def test_steps_only_move_forward_and_are_reached_only_at_the_weight_the_router_reads(
    run: Run,
) -> None:
    """Step indexes grow within the plan, a step is verified only when the router reads its
    weight, and the reported state is always the one derived from the facts."""
    world = World(run.plan, lag=run.lag)
    for played in play(world, run):
        before, after = played.before, played.decision.progress
        assert before.step_index <= after.step_index < len(run.plan.steps)
        newly_verified = after.step_verified_at is not None and (
            before.step_verified_at is None or before.step_index != after.step_index
        )
        if newly_verified:
            assert world.router_weight == run.plan.step_weight(after.step_index)
        assert played.decision.state in set(State)
        assert played.decision.state is state_of(run.plan, after)


@RUNS
@given(runs)
def test_no_step_completes_while_a_gate_is_short_of_its_min_samples(run: Run) -> None:
    """A step that asks its gates for ``min_samples`` completes (by its bake or a promotion)
    only on evaluations made since it was reached that rest on at least that many; only
    ``promote --full`` skips it."""
    for played in play(World(run.plan, lag=run.lag), run):
        before, after = played.before, played.decision.progress
        left = after.step_index != before.step_index or (
            after.ended == "completed" and before.ended is None
        )
        skipped = any(c.kind == "promote" and c.full for c in played.commands)
        if not left or skipped:
            continue
        for gate, needed in run.plan.steps[before.step_index].min_samples.items():
            result = played.verdicts[gate]
            assert before.step_verified_at is not None
            assert result.evaluated_at >= before.step_verified_at
            assert (result.samples or 0) >= needed
