"""Where a compare gate's final look looks: the reconciler's window over the gate's steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rolloutd.analysis.base import FinalWindow
from rolloutd.plan import Plan
from rolloutd.progress import Progress
from rolloutd.reconcile import _final_window
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
    assert _final_window(_plan(), "not_worse", progress, verified, now) == FinalWindow(T, None)


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
        window = _final_window(_plan(), "not_worse", progress, verified, now)
        assert window == FinalWindow(T, expected)


def test_no_window_at_an_earlier_step_or_for_a_gate_on_one_step_elsewhere() -> None:
    """The shadow step is not the last to carry the gate; 'fast' is only on step 2."""
    progress = Progress(started_at=T, step_index=0, step_verified_at=T, bake_mark=T)
    assert _final_window(_plan(), "not_worse", progress, {0: T}, T) is None
    assert _final_window(_plan(), "fast", progress, {0: T}, T) is None
