"""The preflight's sorting of answers: ok, no data yet, absent; and what blocks a start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rolloutd.analysis.base import Measurement, MeasurementError, Pool
from rolloutd.analysis.preflight import blocking, check_plan, first_step_gates
from tests.plans import example_plan

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class Answers:
    """A metrics source that answers per signal: a value, no traffic, or an absent series."""

    def __init__(self, absent: set[str], quiet: set[str]) -> None:
        self.absent = absent
        self.quiet = quiet

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        if signal in self.absent:
            raise MeasurementError(f"no series for x{{pool={pool!r}}}: gone", query="q")
        if signal in self.quiet:
            raise MeasurementError(f"{signal} on {pool}: no traffic in the window (0 samples)")
        return Measurement(0.5, 100, query="q")


def test_every_metrics_gate_is_checked_on_both_pools() -> None:
    """Each gate read from metrics appears once per pool (suites judge themselves; the
    capacity watch reads two signals)."""
    plan = example_plan()
    checks = check_plan(plan, Answers(set(), set()), NOW)
    gates = {c.gate for c in checks}
    suites = {name for name, g in plan.gates.items() if g.kind == "suite"}
    assert gates == set(plan.gates) - suites
    assert all({c.pool for c in checks if c.gate == g} == {"canary", "stable"} for g in gates)
    assert {c.found for c in checks} == {"ok"}


def test_only_an_absent_signal_of_a_first_tick_gate_blocks() -> None:
    """No traffic yet is 'no data yet' and never blocks; an absent series blocks only for
    the gates judged from the first tick (first step, triggers)."""
    plan = example_plan()
    first = first_step_gates(plan)
    trigger = plan.rollback.triggers[0]
    trigger_signal = plan.gates[trigger].signal  # type: ignore[union-attr]
    checks = check_plan(plan, Answers({trigger_signal}, {"e2e_latency"}), NOW)
    quiet = [c for c in checks if c.signal == "e2e_latency"]
    assert quiet and all(c.found == "no data yet" for c in quiet)
    blocked = blocking(checks)
    assert blocked and {c.gate for c in blocked} <= first
    assert trigger in {c.gate for c in blocked}
    assert all("no series for" in c.why for c in blocked)
