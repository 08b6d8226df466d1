"""What the views of a rollout need of its plan, without the plan: its steps and gate roles.

``rolloutctl status`` and ``list`` show a rollout's step, weight and gates. The plan model
that says those things is about forty pydantic classes, and building them takes longer than
the rest of such a command's run (``bench/cli_start.py``). A plan never changes once a
rollout starts, so what the views derive from it is derived once, at the start, and stored
with the rollout as this outline; the views read the outline and never build the plan.
:meth:`rolloutd.core.plan.Plan.outline` makes one, and tests hold the two to the same answers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rolloutd.core.progress import Progress, State, derive_state

OUTLINE_VERSION = 1
"""Bumped when the stored shape changes; an outline of another version is rebuilt from the
plan, as one that is missing is (rollouts started before outlines were stored)."""


@dataclass(frozen=True)
class StepOutline:
    """One step as a view shows it: ``weight`` is the canary weight in force during it (a
    pause keeps the one before), ``awaits_promotion`` that it ends only on a promote."""

    kind: str
    title: str
    weight: int
    hold_seconds: float
    awaits_promotion: bool
    gates: tuple[str, ...]


@dataclass(frozen=True)
class PlanOutline:
    """A plan's steps, rollback triggers and gate names."""

    steps: tuple[StepOutline, ...]
    triggers: tuple[str, ...]
    gates: tuple[str, ...]

    def step(self, progress: Progress) -> tuple[int, StepOutline]:
        """The index of the step ``progress`` is in (the last one once past it) and its step."""
        index = min(progress.step_index, len(self.steps) - 1)
        return index, self.steps[index]

    def state(self, progress: Progress) -> State:
        """The user-facing state of ``progress``, as :func:`rolloutd.core.machine.state_of`."""
        return derive_state(progress, awaiting_promotion=self.step(progress)[1].awaits_promotion)

    def weight(self, progress: Progress) -> int:
        """The canary weight the rollout intends now, in percent."""
        weight = settled_weight(self.state(progress))
        return self.step(progress)[1].weight if weight is None else weight

    def as_json(self) -> dict[str, Any]:
        return {"version": OUTLINE_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: object) -> PlanOutline | None:
        """The outline stored as ``data``, or None where there is none of this version."""
        if not isinstance(data, dict) or data.get("version") != OUTLINE_VERSION:
            return None
        steps = tuple(
            StepOutline(**{**step, "gates": tuple(step["gates"])}) for step in data["steps"]
        )
        return cls(steps, tuple(data["triggers"]), tuple(data["gates"]))


def settled_weight(state: State) -> int | None:
    """The canary weight ``state`` implies whatever the step: all of it once completed, none
    before the start and during or after a rollback (None: the current step's)."""
    if state is State.COMPLETED:
        return 100
    if state in (State.PENDING, State.ROLLING_BACK, State.ROLLED_BACK, State.ABORTED, State.FAILED):
        return 0
    return None
