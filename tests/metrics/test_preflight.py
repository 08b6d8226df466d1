"""The preflight's sorting of answers: ok, no data yet, absent; and what blocks a start."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rolloutd.evaluation.sampling import CAPTURE, check_captures
from rolloutd.gates.base import Measurement, MeasurementError, Pool
from rolloutd.gateway import Capture
from rolloutd.metrics.preflight import blocking, check_plan, first_step_gates
from tests.cli import Ctl
from tests.plans import example_plan, plan_of, small_dict, to_yaml

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


def _live_plan(capture: str, min_cases: int = 5) -> dict[str, object]:
    data = small_dict()
    data["gates"]["live"] = {
        "kind": "suite",
        "rule": "no_regression",
        "sampled": {"capture": capture, "cases": 20, "min_cases": min_cases, "window": "24h"},
    }
    data["steps"][0]["gates"] = ["healthy", "live"]
    return data


def test_a_live_suite_gate_counts_the_usable_cases_its_capture_holds(tmp_path: Path) -> None:
    """ok at min_cases usable cases, no data yet below, absent without the directory; the
    row gives counts and the directory, never what was captured."""
    from tests.capture.test_capture import answer, body

    clock_now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    capture = Capture(tmp_path / "cap", share=1.0, clock=lambda: clock_now - timedelta(hours=1))
    for i in range(6):
        capture.record(body(f"refund {i}"), answer=answer(f"O{i}"), status_code=200, pool="stable")
    capture.record(body("x"), answer=answer(), status_code=200, pool="canary")
    (ok,) = check_captures(plan_of(_live_plan(str(tmp_path / "cap"))), clock_now)
    assert (ok.gate, ok.signal, ok.found, ok.value, ok.samples) == ("live", CAPTURE, "ok", 6.0, 7)
    assert ok.first_step and ok.why == (
        "6 usable of 7 captured in the last 1d (a run samples 20, needs 5)"
    )
    (short,) = check_captures(plan_of(_live_plan(str(tmp_path / "cap"), 10)), clock_now)
    assert short.found == "no data yet"
    (absent,) = check_captures(plan_of(_live_plan(str(tmp_path / "none"))), clock_now)
    assert absent.found == "absent" and absent.why == "no such capture directory"
    assert blocking([ok, short, absent]) == [absent]


def test_plan_check_prints_the_capture_row_for_a_plan_without_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A memory-metrics plan has nothing for Prometheus to answer, but its live suite gate's
    capture is still counted; a missing capture directory for a first-step gate exits 3."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(to_yaml(_live_plan(str(tmp_path / "none"))))
    ctl = Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)
    code, out, _ = ctl("plan", "check", str(plan), "-o", "json")
    (row,) = json.loads(out)
    assert code == 3 and (row["gate"], row["found"]) == ("live", "absent")
