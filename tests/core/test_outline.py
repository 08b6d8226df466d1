"""The outline stored with a rollout answers what its plan would: state, step, weight, gates."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rolloutd.core.machine import state_of
from rolloutd.core.outline import OUTLINE_VERSION, PlanOutline
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress, RollbackFacts, State
from rolloutd.planfile import load_plan
from tests.plans import example_plan, plan_of, small_dict, traffic_only_example_plan

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = Path(__file__).resolve().parents[2] / "config" / "plans"


def _plans() -> list[Plan]:
    promoted_by_hand = small_dict()
    promoted_by_hand["steps"][1] = {"kind": "pause"}  # waits for an operator
    return [
        example_plan(),
        traffic_only_example_plan(),
        plan_of(small_dict()),
        plan_of(promoted_by_hand),
        *(load_plan(path).plan for path in sorted(CONFIG.glob("*.yaml"))),
    ]


def _progresses(steps: int) -> list[Progress]:
    """Every kind of progress the views meet, at every step and one past the last."""
    rollback = RollbackFacts(cause="gate oom breached", started_at=T0)
    found = [Progress()]
    for index in range(steps + 1):
        running = Progress(started_at=T0, step_index=index)
        found += [
            running,
            Progress(started_at=T0, step_index=index, paused="operator"),
            Progress(started_at=T0, step_index=index, rollback=rollback),
            Progress(
                started_at=T0,
                step_index=index,
                rollback=rollback,
                ended=State.ROLLED_BACK.value,
                ended_at=T0,
            ),
            Progress(started_at=T0, step_index=index, ended=State.COMPLETED.value, ended_at=T0),
        ]
    return found


def _weight_by_plan(plan: Plan, progress: Progress) -> int:
    state = state_of(plan, progress)
    if state is State.COMPLETED:
        return 100
    if state in (State.PENDING, State.ROLLING_BACK, State.ROLLED_BACK, State.ABORTED, State.FAILED):
        return 0
    return plan.step_weight(min(progress.step_index, len(plan.steps) - 1))


@pytest.mark.parametrize("plan", _plans(), ids=lambda plan: plan.name)
def test_the_outline_answers_as_the_plan(plan: Plan) -> None:
    """State, step, weight, bake, the step's gates and the triggers, for every progress."""
    outline = plan.outline()
    assert outline.triggers == tuple(plan.rollback.triggers)
    assert outline.gates == tuple(plan.gates)
    for progress in _progresses(len(plan.steps)):
        index, step = outline.step(progress)
        planned = plan.steps[index]
        assert index == min(progress.step_index, len(plan.steps) - 1)
        assert outline.state(progress) is state_of(plan, progress)
        assert outline.weight(progress) == _weight_by_plan(plan, progress)
        assert (step.kind, step.title, step.hold_seconds, step.gates) == (
            planned.kind,
            planned.title(),
            planned.hold_for().total_seconds(),
            plan.gates_of(index),
        )


@pytest.mark.parametrize("plan", _plans(), ids=lambda plan: plan.name)
def test_an_outline_is_stored_as_json_and_read_back_whole(plan: Plan) -> None:
    outline = plan.outline()
    stored = json.loads(json.dumps(outline.as_json()))
    assert PlanOutline.from_json(stored) == outline


@pytest.mark.parametrize(
    "stored",
    [None, {}, [], "steps", {"version": OUTLINE_VERSION + 1, "steps": [], "triggers": []}],
)
def test_a_missing_or_other_outline_reads_as_none(stored: object) -> None:
    """A rollout stored before outlines, or by another version's shape, has none to read:
    the views derive it from the plan."""
    assert PlanOutline.from_json(stored) is None


def test_a_pause_without_a_duration_awaits_promotion() -> None:
    data = small_dict()
    data["steps"][1] = {"kind": "pause"}
    outline = plan_of(data).outline()
    assert [step.awaits_promotion for step in outline.steps] == [
        False,
        True,
        False,
        False,
        False,
    ]
    waiting = Progress(started_at=T0, step_index=1)
    assert outline.state(waiting) is State.AWAITING_PROMOTION
    assert outline.weight(waiting) == 0  # a pause after shadow keeps shadow's weight
