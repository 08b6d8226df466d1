"""A canary whose metrics exporter goes silent at 5%: its frozen counts are not data, and the
step never completes on them. The engine's ``up`` drops with its exporter, which the OOM
trigger cannot tell from a dead engine: the rollout rolls back, it never reaches 100%."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.stack import CANARY, Stack

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MAX_INCONCLUSIVE = 4


def test_a_silent_canary_exporter_rolls_back_at_5_percent(
    stack_for: Callable[..., Stack],
) -> None:
    """The canary engine keeps serving but its /metrics answers 503 from the 5% step on:
    the OOM trigger sees its target down and rolls back; no step completes on the frozen
    counts and nothing above 5% is ever set."""
    stack = stack_for("triton")
    rollout = stack.start_rollout(
        stack.plan("e2e-silent-canary", max_inconclusive=MAX_INCONCLUSIVE)
    )
    stack.wait_verified(rollout, 5)
    stack.set_faults(CANARY, metrics_silent=1)
    assert stack.wait_state(rollout, {"paused", "completed", "rolled_back"}, 90) == "rolled_back"
    assert stack.weight() == 0
    (started,) = [e for e in stack.events(rollout) if e["kind"] == "rollback_started"]
    assert "canary_oom" in started["detail"]
    assert "step_completed" not in stack.event_kinds(rollout)
