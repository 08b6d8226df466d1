"""The ``file`` metrics source: the window it was written for, and no other."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rolloutd.core.actions import Verdict
from rolloutd.drivers import PlanDrivers
from rolloutd.gates.base import Judging, MeasurementError
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.sources import FileMetrics
from tests.plans import file_plan, memory_plan, plan_of

WRITTEN = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _file(tmp_path: Path, document: dict[str, object]) -> Path:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(document))
    os.utime(path, (WRITTEN.timestamp(), WRITTEN.timestamp()))
    return path


def test_the_latest_window_is_answered_and_an_older_one_is_refused(tmp_path: Path) -> None:
    """A window ending when the file was written (or a minute before, or later) reads it; one
    that ended earlier than that is a measurement error naming the file, never the present."""
    path = _file(tmp_path, {"error_rate": {"canary": {"value": 0.01, "samples": 900}}})
    source = FileMetrics(path)
    for end in (WRITTEN, WRITTEN - timedelta(seconds=59), WRITTEN + timedelta(hours=1)):
        measured = source.measure("error_rate", "canary", timedelta(minutes=5), end)
        assert (measured.value, measured.samples) == (0.01, 900)
    with pytest.raises(MeasurementError) as refused:
        source.measure("error_rate", "canary", timedelta(minutes=5), WRITTEN - timedelta(hours=1))
    assert str(path) in str(refused.value)
    assert "cannot answer one that ended 2026-03-02 11:00:00 UTC" in str(refused.value)


def test_a_comparison_does_not_count_the_present_again_for_an_earlier_step(
    tmp_path: Path,
) -> None:
    """At the 25% step a compare gate asks for the 5% step's window too. The file holds only
    the present, and answering that window with it counted the same 40 canary escalations
    twice, as evidence of a step that was never measured; now the gate is inconclusive and
    says why."""
    counts = {
        "canary": {"value": 40, "samples": 2500},
        "stable": {"value": 100, "samples": 7500},
    }
    path = _file(tmp_path, {"escalations": counts})
    gates = {"esc": {"kind": "compare", "signal": "escalations", "alpha": 0.05}}
    plan = plan_of(memory_plan(gate="", triggers=(), gates=gates))
    for step in plan.steps[:2]:
        step.gates.append("esc")
    earlier = ((WRITTEN - timedelta(hours=3), WRITTEN - timedelta(hours=2)),)
    judging = Judging(
        "esc",
        "step",
        FileMetrics(path),
        WRITTEN,
        plan,
        WRITTEN - timedelta(hours=1),
        25,
        earlier=earlier,
    )
    result = evaluate_gate(plan.gates["esc"], judging)
    assert result.verdict is Verdict.INCONCLUSIVE, result
    assert "holds only its latest window" in (result.reason or "")


def test_rollouts_reading_one_metrics_file_share_one_reader(tmp_path: Path) -> None:
    """Thousands of rollouts started from copies of one plan read one metrics file: the
    leader keeps one parsed document of it, not one a rollout; another file has its own."""
    drivers = PlanDrivers()
    shared, own = tmp_path / "metrics.json", tmp_path / "mine.json"
    plans = [
        plan_of(file_plan(f"svc-{i}", tmp_path / f"w{i}.json", own if i == 2 else shared))
        for i in range(3)
    ]
    sources = [drivers.metrics(i, plan) for i, plan in enumerate(plans)]
    assert isinstance(sources[0], FileMetrics)
    assert sources[1] is sources[0]
    assert sources[2] is not sources[0] and sources[2].path == own
