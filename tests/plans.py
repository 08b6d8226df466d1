"""Plans and a fake world for the plan and state-machine tests.

Plan builders return plain dicts, the shape an operator writes, so a test changes only the
field it is about and turns the result into YAML. :class:`World` plays the daemon's part
around :func:`rolloutd.core.machine.decide`: it performs the returned actions on a fake router
(and a rollback's redeploys and verifications, which always succeed) and reports what it saw on
the next tick. Time only moves when a test says so.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rolloutd.core.actions import (
    Action,
    Alert,
    Command,
    CommandKind,
    Deploy,
    GateResult,
    Observed,
    Verdict,
    Verify,
)
from rolloutd.core.machine import Decision, decide, state_of
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress, State
from rolloutd.errors import BadInput, Problem
from rolloutd.planfile import load_plan, parse_plan

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PATH = REPO / "config" / "plans" / "atlas-70b-maxseq8192.yaml"
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
SOURCE = "plan.yaml"

# --- plans ----------------------------------------------------------------------------------


def example_dict() -> dict[str, Any]:
    """The reference plan as the dict its YAML holds (a fresh copy each call)."""
    return copy.deepcopy(_example_data())


@functools.cache
def _example_data() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE_PATH.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@functools.cache
def compare_plan(**gate: Any) -> Plan:
    """The example plan with a compare gate ``not_worse`` (``gate``'s fields) judging its
    canary steps."""
    data = example_dict()
    data["gates"]["not_worse"] = {"kind": "compare", **gate}
    for step in data["steps"]:
        if step["kind"] == "canary":
            step["gates"].append("not_worse")
    return plan_of(data)


def example_plan() -> Plan:
    """The reference plan, validated (plans are frozen, so one copy serves every test)."""
    return load_plan(EXAMPLE_PATH).plan


NO_EXECUTOR = {"kind": "none", "reason": "the test's replicas are twins: traffic only"}
"""The ``executor`` section of a plan that rolls back traffic only, saying why."""


@functools.cache
def traffic_only_example_plan() -> Plan:
    """The reference plan without its executor: a rollback ends once the router reads 0."""
    return plan_of({**example_dict(), "executor": NO_EXECUTOR})


def pools(
    stable_url: str = "http://127.0.0.1:9",
    canary_url: str = "http://127.0.0.1:9",
    *,
    names: tuple[str, str] = ("s0", "c0"),
) -> dict[str, Any]:
    """The ``pools`` section: one stable and one canary replica (``names``) at the URLs given
    (by default a port nothing listens on, for plans whose drivers never call a replica)."""
    stable, canary = names
    return {
        "stable": {"replicas": [{"name": stable, "url": stable_url}]},
        "canary": {"replicas": [{"name": canary, "url": canary_url}]},
    }


def small_dict() -> dict[str, Any]:
    """A short plan: shadow 1h, a timed 30m pause, canary 10% for 2h, full, steady 1h."""
    return {
        "name": "small",
        "service": "svc",
        "environment": "staging",
        "pools": pools("http://127.0.0.1:9001", "http://127.0.0.1:9002", names=("s1", "c1")),
        "router": {"driver": "memory"},
        "metrics": {"source": "memory"},
        "artefacts": {"stable": "build-old", "canary": "build-new"},
        "limits": {"max_inconclusive": 3, "on_inconclusive": "pause", "progress_deadline": "6h"},
        "gates": {
            "healthy": {"kind": "threshold", "signal": "error_rate", "max": 0.01},
            "fast": {"kind": "latency", "signal": "e2e_latency", "target_seconds": 2.0},
            "crash": {"kind": "events", "signal": "oom_events"},
        },
        "steps": [
            {"kind": "shadow", "duration": "1h", "gates": ["healthy"]},
            {"kind": "pause", "duration": "30m"},
            {"kind": "canary", "weight": 10, "bake": "2h", "gates": ["healthy", "fast"]},
            {"kind": "full"},
            {"kind": "steady", "duration": "1h", "gates": ["healthy"]},
        ],
        "rollback": {"triggers": ["crash"]},
    }


def memory_plan(
    *,
    name: str = "atlas-small",
    service: str = "atlas-70b",
    environment: str = "staging",
    gate: str = "timeouts",
    interval: str = "30s",
    trigger_interval: str = "5s",
    steps: Sequence[Mapping[str, Any]] | None = None,
    triggers: Sequence[str] = ("oom",),
    **extra: Any,
) -> dict[str, Any]:
    """The reference change on the memory twins: canary 5% and 25% (48 h bakes) judged on the
    queue-timeout rate (``gate``), a pause, full; OOM events roll back. ``extra`` adds or
    replaces top-level sections (limits, alerts, ...)."""
    judged = [gate] if gate else []
    plan: dict[str, Any] = {
        "name": name,
        "service": service,
        "environment": environment,
        "pools": pools(),
        "router": {"driver": "memory"},
        "metrics": {"source": "memory"},
        "artefacts": {"stable": "fp8-msl32768", "canary": "fp8-msl8192"},
        "interval": interval,
        "trigger_interval": trigger_interval,
        "gates": {
            **(
                {
                    gate: {
                        "kind": "threshold",
                        "signal": "queue_timeout_rate",
                        "max": 0.01,
                        "min_samples": 100,
                    }
                }
                if gate
                else {}
            ),
            "oom": {"kind": "events", "signal": "oom_events"},
        },
        "steps": [
            dict(step)
            for step in steps
            or (
                {"kind": "canary", "weight": 5, "bake": "48h", "gates": judged},
                {"kind": "canary", "weight": 25, "bake": "48h", "gates": judged},
                {"kind": "pause"},
                {"kind": "full"},
            )
        ],
        "rollback": {"triggers": list(triggers)},
    }
    plan.update(extra)
    return plan


# Canary 5% and 25% for an hour each, then everything.
HOURLY_STEPS = (
    {"kind": "canary", "weight": 5, "bake": "1h"},
    {"kind": "canary", "weight": 25, "bake": "1h"},
    {"kind": "full"},
)


def file_plan(name: str, weights: Path, metrics: Path, **fields: Any) -> dict[str, Any]:
    """A plan on the ``file`` router (``weights``) and ``file`` metrics (``metrics``): canary
    5% and 25% for an hour each, then full; any OOM in the last minute (the ``crash`` gate)
    rolls back. ``fields`` are :func:`memory_plan`'s arguments, to change any of that."""
    defaults: dict[str, Any] = {
        "gate": "",
        "steps": HOURLY_STEPS,
        "triggers": ("crash",),
        "router": {"driver": "file", "path": str(weights)},
        "metrics": {"source": "file", "path": str(metrics)},
        "artefacts": {"stable": "build-old", "canary": "build-new"},
        "gates": {"crash": {"kind": "events", "signal": "oom_events", "window": "1m"}},
    }
    return memory_plan(name=name, **{**defaults, **fields})


def to_yaml(data: Mapping[str, Any]) -> str:
    """``data`` as YAML text, keys in the order given."""
    return yaml.safe_dump(dict(data), sort_keys=False)


def plan_of(data: Mapping[str, Any]) -> Plan:
    """Validate ``data`` as a plan (the test fails with the problems if it is invalid)."""
    return parse_plan(to_yaml(data), SOURCE).plan


@functools.cache
def small_plan(max_inconclusive: int = 3, on_inconclusive: str = "pause") -> Plan:
    """The small plan with the inconclusive limits given."""
    data = small_dict()
    data["limits"].update(max_inconclusive=max_inconclusive, on_inconclusive=on_inconclusive)
    return plan_of(data)


def problems_in(text: str, source: str = SOURCE) -> tuple[Problem, ...]:
    """The problems ``parse_plan`` reports for ``text``; fails the test if there are none."""
    try:
        parse_plan(text, source)
    except BadInput as exc:
        return exc.problems
    raise AssertionError("the plan was accepted, but problems were expected")


def problems_of(data: Mapping[str, Any]) -> tuple[Problem, ...]:
    """The problems reported for the plan ``data``."""
    return problems_in(to_yaml(data))


# --- verdicts and commands ------------------------------------------------------------------


# More samples than any plan in the tests asks a step for.
PLENTY = 1_000_000


def results(
    at: datetime, verdicts: Mapping[str, Verdict], *, samples: int | None = None
) -> dict[str, GateResult]:
    """Gate results for ``verdicts``, all evaluated at ``at`` (resting on ``samples``)."""
    return {gate: GateResult(verdict, at, samples=samples) for gate, verdict in verdicts.items()}


def every_gate(
    plan: Plan, verdict: Verdict, at: datetime, *, samples: int | None = None
) -> dict[str, GateResult]:
    """The same verdict for every gate the plan defines."""
    return results(at, dict.fromkeys(plan.gates, verdict), samples=samples)


_command_ids = itertools.count(1)


def command(kind: CommandKind, *, full: bool = False, actor: str = "alice") -> Command:
    """An operator command with a fresh id."""
    return Command(next(_command_ids), kind, actor, reason=f"test {kind}", full=full)


@dataclass(frozen=True)
class SetWeight:
    """The attempt a tick makes toward a new desired fact, as the shell makes it."""

    key: str
    weight: int
    mirror: bool = False
    generation: int = 1


def attempted(before: Progress, decision: Decision) -> list[SetWeight]:
    """The weight a decision has the shell attempt: its desired fact, when it is new."""
    desired = decision.progress.desired
    if desired is None or desired == before.desired:
        return []
    return [SetWeight(desired.key, desired.weight, desired.mirror, desired.generation)]


# --- the world around the machine -----------------------------------------------------------


@dataclass
class World:
    """A rollout, a clock and a fake router, advanced one :func:`decide` call at a time.

    The shell marks a ``SetWeight`` done as soon as it sent it (unless ``mark_done`` is
    off), and a ``Deploy`` or ``Verify`` as soon as it performed it; the router reads the new
    weight back ``lag`` ticks later (never if ``lag`` is None). Every action and decision is
    kept for the assertions.
    """

    plan: Plan
    now: datetime = T0
    progress: Progress = field(default_factory=Progress)
    lag: int | None = 0
    mark_done: bool = True
    router_weight: int = 0
    done: set[str] = field(default_factory=set)
    in_flight: list[tuple[int, int]] = field(default_factory=list)  # (ticks left, weight)
    actions: list[Action | SetWeight] = field(default_factory=list)
    last: list[Action | SetWeight] = field(default_factory=list)
    """What the last tick performed: its attempt toward a new desired fact, then its actions."""
    decisions: list[Decision] = field(default_factory=list)

    @property
    def state(self) -> State:
        """The user-facing state now."""
        return state_of(self.plan, self.progress)

    def wait(self, delta: timedelta) -> None:
        """Move the clock forward."""
        self.now += delta

    def observed(self) -> Observed:
        """What the shell reports before a tick: weights sent ``lag`` ticks ago have landed."""
        for ticks_left, weight in self.in_flight:
            if ticks_left <= 0:
                self.router_weight = weight
        self.in_flight = [(n - 1, w) for n, w in self.in_flight if n > 0]
        return Observed(router_weight=self.router_weight, done_actions=frozenset(self.done))

    def tick(
        self,
        verdicts: Mapping[str, GateResult] | None = None,
        commands: Sequence[Command] = (),
        *,
        preflight_error: str | None = None,
    ) -> Decision:
        """One decision at the current time; its actions are performed at once."""
        decision = decide(
            self.plan,
            self.progress,
            verdicts=verdicts or {},
            commands=commands,
            observed=self.observed(),
            now=self.now,
            preflight_error=preflight_error,
        )
        before, self.progress = self.progress, decision.progress
        self.decisions.append(decision)
        self.last = [*attempted(before, decision), *decision.actions]
        self.perform(self.last)
        return decision

    def perform(self, actions: Iterable[Action | SetWeight]) -> None:
        """Send set-weight actions to the router and perform redeploys and verifications;
        alerts need nothing from the fake."""
        for action in actions:
            self.actions.append(action)
            if isinstance(action, Deploy | Verify):
                self.done.add(action.key)
            if not isinstance(action, SetWeight):
                continue
            if self.mark_done:
                self.done.add(action.key)
            if self.lag is not None:
                self.in_flight.append((self.lag, action.weight))

    def passing(self) -> dict[str, GateResult]:
        """Every gate of the plan passing, evaluated now, on plenty of samples."""
        return every_gate(self.plan, Verdict.PASS, self.now, samples=PLENTY)

    def happy_tick(self) -> Decision:
        """A tick with every gate passing, promoting when the rollout awaits promotion."""
        verified = self.progress.step_verified_at is not None
        awaiting = self.state is State.AWAITING_PROMOTION and verified
        return self.tick(self.passing(), [command("promote")] if awaiting else [])

    def run_to_completion(self, every: timedelta, ticks: int) -> World:
        """Happy ticks ``every`` apart until the rollout completes (``ticks`` at most)."""
        for _ in range(ticks):
            if self.state is State.COMPLETED:
                break
            self.wait(every)
            self.happy_tick()
        return self

    def reach(self, index: int) -> World:
        """Run the happy path until step ``index`` is entered and its weight verified."""
        for _ in range(50):
            p = self.progress
            verified = p.step_verified_at is not None
            if p.started_at is not None and p.step_index == index and verified:
                return self
            if p.step_verified_at is not None:
                self.wait(max(self.plan.steps[p.step_index].hold_for(), timedelta(minutes=1)))
            else:
                self.wait(timedelta(seconds=30))
            self.happy_tick()
        raise AssertionError(f"step {index} was not reached: {self.state} at {p.step_index}")


def weights_set(actions: Iterable[Action | SetWeight]) -> list[tuple[str, int]]:
    """The (key, weight) of every set-weight action, in order."""
    return [(a.key, a.weight) for a in actions if isinstance(a, SetWeight)]


def alert_topics(actions: Iterable[Action | SetWeight]) -> list[str]:
    """The topic of every alert action, in order."""
    return [a.topic for a in actions if isinstance(a, Alert)]
