"""Where a compare gate looks: its final look's window and the earlier steps' windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress
from rolloutd.gates.base import FinalWindow
from rolloutd.gates.windows import bake_over, earlier_windows, final_window
from tests.plans import plan_of, small_dict

T = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _plan() -> Plan:
    """shadow (mirrored) -> pause -> canary 10% (2h bake) -> full -> steady, with the
    compare gate on the shadow and canary steps."""
    data = small_dict()
    data["gates"]["not_worse"] = {"kind": "compare", "signal": "escalations"}
    data["steps"][0]["gates"] = ["healthy", "not_worse"]
    data["steps"][2]["gates"] = ["healthy", "fast", "not_worse"]
    return plan_of(data)


def test_the_window_opens_at_the_first_step_and_waits_for_the_last_bake() -> None:
    """Mid-bake of the last step carrying the gate: start known, end not yet."""
    verified = {0: T, 2: T + timedelta(hours=2)}
    progress = Progress(
        started_at=T,
        step_index=2,
        step_verified_at=T + timedelta(hours=2),
        bake_mark=T + timedelta(hours=2),
    )
    now = T + timedelta(hours=3)
    assert final_window(_plan(), "not_worse", progress, verified, now) == FinalWindow(T, None)


def test_the_end_is_where_the_bake_clock_reached_the_bake_and_stays_there() -> None:
    """After 30 min paused in the bake, the end moves by those 30 min, and later ticks keep it."""
    verified = {0: T, 2: T + timedelta(hours=2)}
    resumed = T + timedelta(hours=3)
    progress = Progress(
        started_at=T,
        step_index=2,
        step_verified_at=T + timedelta(hours=2),
        baked_seconds=1800.0,  # 30 min baked before a 30 min pause
        bake_mark=resumed,
    )
    expected = resumed + timedelta(minutes=90)
    for now in (expected, expected + timedelta(minutes=7), expected + timedelta(hours=1)):
        window = final_window(_plan(), "not_worse", progress, verified, now)
        assert window == FinalWindow(T, expected)


def test_no_window_at_an_earlier_step_or_for_a_gate_on_one_step_elsewhere() -> None:
    """The shadow step is not the last to carry the gate; 'fast' is only on step 2."""
    progress = Progress(started_at=T, step_index=0, step_verified_at=T, bake_mark=T)
    assert final_window(_plan(), "not_worse", progress, {0: T}, T) is None
    assert final_window(_plan(), "fast", progress, {0: T}, T) is None


def test_earlier_windows_are_the_completed_steps_that_judged_the_gate() -> None:
    """At the canary step, a step gate looks back at the shadow step that carried it; a
    trigger looks back at the shadow step and the pause alike."""
    progress = Progress(started_at=T, step_index=2, step_verified_at=T + timedelta(hours=2))
    verified = {0: T, 1: T + timedelta(hours=1)}
    completed = {0: T + timedelta(hours=1), 1: T + timedelta(hours=2)}
    shadow, pause = (verified[0], completed[0]), (verified[1], completed[1])
    assert earlier_windows(_plan(), "not_worse", "step", progress, verified, completed) == (shadow,)
    assert earlier_windows(_plan(), "healthy", "trigger", progress, verified, completed) == (
        shadow,
        pause,
    )


def test_a_step_where_one_pool_is_idle_gives_no_window() -> None:
    """Past the full step the stable pool serves nothing, so the full step gives no window."""
    progress = Progress(started_at=T, step_index=4)
    verified = {3: T}
    completed = {3: T + timedelta(hours=1)}
    assert earlier_windows(_plan(), "healthy", "trigger", progress, verified, completed) == ()


def test_a_step_not_yet_completed_or_never_verified_has_no_earlier_window() -> None:
    """Only steps with both a verified and a later completed time give a window."""
    progress = Progress(started_at=T, step_index=2)
    verified = {0: T, 1: None}
    completed = {0: None, 1: T}
    assert earlier_windows(_plan(), "healthy", "trigger", progress, verified, completed) == ()


def test_the_bake_is_over_at_its_hold_or_where_it_was_promoted_never_without_one() -> None:
    """The 2h canary bake is over at 2h of bake time, at 30 min when promoted there, and a
    step with no bake (the full step) never has a whole to judge."""
    plan = _plan()
    baking = Progress(started_at=T, step_index=2, step_verified_at=T, bake_mark=T)
    assert not bake_over(plan, baking, T + timedelta(minutes=119))
    assert bake_over(plan, baking, T + timedelta(hours=2))
    promoted = Progress(
        started_at=T,
        step_index=2,
        step_verified_at=T,
        bake_mark=T,
        promoted=True,
        promoted_after_seconds=1800,
    )
    assert bake_over(plan, promoted, T + timedelta(minutes=30))
    full = Progress(started_at=T, step_index=3, step_verified_at=T, bake_mark=T)
    assert not bake_over(plan, full, T + timedelta(days=3))
