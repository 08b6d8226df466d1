"""plan validate warns about step gates that cannot pass at their step's load, names the
step that will judge them, and says how finely the latency histogram resolves the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rolloutd.gateway import DURATION_BUCKETS
from rolloutd.loadmatch import resolution
from rolloutd.plan import LatencyGate, planned_load_ratio
from rolloutd.planfile import parse_plan
from tests.plans import example_dict, to_yaml


def _warnings(data: dict[str, Any]) -> list[tuple[str, str]]:
    loaded = parse_plan(to_yaml(data), "plan.yaml")
    return [(w.field, w.message) for w in loaded.warnings]


def _latency_at_5_percent() -> dict[str, Any]:
    """The reference plan with its latency gate on the 5% step as well."""
    data = example_dict()
    data["steps"][1]["gates"].insert(0, "e2e_latency_p95")
    return data


def test_the_planned_load_ratio_is_canary_share_per_replica_over_stables() -> None:
    """(w / nc) / ((1 - w) / ns): 5% on 1 of 4 replicas is 0.16, 25% is 1."""
    assert planned_load_ratio(5, 1, 3) == pytest.approx(0.158, abs=1e-3)
    assert planned_load_ratio(25, 1, 3) == pytest.approx(1.0)
    assert planned_load_ratio(50, 2, 2) == pytest.approx(1.0)


def test_the_reference_plan_judges_latency_where_the_load_matches() -> None:
    """As shipped, the latency gate sits on the 25% step only: no warning."""
    assert _warnings(example_dict()) == []


def test_a_latency_gate_at_5_percent_is_named_with_the_step_that_judges_it() -> None:
    """One canary of four at 5%: the warning gives the ratio, says the step cannot complete
    on the gate, names the 25% step and the gateway buckets' edges at the 14 s target."""
    ((field, message),) = _warnings(_latency_at_5_percent())
    assert field == "steps[1].gates[0]"
    assert "gate 'e2e_latency_p95' cannot pass at 5%" in message
    assert "carries 0.16 of a stable replica's load (1 canary, 3 stable)" in message
    assert "min_load_ratio 0.7" in message and "the step cannot complete on it" in message
    assert "steps[2] (canary 25%) is the first step to judge it, at load ratio 1.00" in message
    assert "the agent gateway's default buckets have edges at 14s and 15s" in message


def test_min_load_ratio_0_silences_the_warning() -> None:
    """A gate that takes a pass at any load can complete the 5% step."""
    data = _latency_at_5_percent()
    data["gates"]["e2e_latency_p95"]["min_load_ratio"] = 0
    assert _warnings(data) == []


def test_a_queue_timeout_comparison_is_warned_about_like_latency() -> None:
    """A compare gate on queue timeouts has the same default floor; escalations have none."""
    data = example_dict()
    data["gates"]["timeouts_vs_stable"] = {"kind": "compare", "signal": "queue_timeouts"}
    data["steps"][1]["gates"] += ["timeouts_vs_stable"]
    ((field, message),) = _warnings(data)
    assert field == "steps[1].gates[4]" and "'timeouts_vs_stable' cannot pass at 5%" in message
    assert "buckets" not in message  # no histogram behind an event count


def test_without_a_step_that_reaches_the_load_the_warning_says_so() -> None:
    """Two canaries of four at 25% carry a third of a stable replica's load; a gate on that
    step alone is never judged before 100%."""
    data = example_dict()
    stable = data["pools"]["stable"]["replicas"]
    data["pools"]["canary"]["replicas"].append(stable.pop())
    data["router"]["servers"]["canary"].append(data["router"]["servers"]["stable"].pop())
    found = dict(_warnings(data))
    message = found["steps[2].gates[0]"]
    assert "carries 0.33 of a stable replica's load (2 canary, 2 stable)" in message
    assert "No later step carrying it reaches that load before 100%" in message


def test_without_known_bucket_edges_the_rule_is_stated() -> None:
    """A plan on another source cannot show the histogram: the warning gives the rule."""
    data = _latency_at_5_percent()
    data["metrics"] = {"source": "memory"}
    ((_, message),) = _warnings(data)
    assert "not stated where validation can see them" in message
    assert "at or above the 14s target, at most 25% above it" in message


def test_a_target_between_edges_says_what_is_never_shown_slower() -> None:
    """A 13.5 s target between the 13 s and 14 s edges: a p95 under 14 s never fails it."""
    gate = LatencyGate(kind="latency", signal="e2e_latency", target_seconds=13.5)
    text = resolution(gate, ("the agent gateway's default buckets", DURATION_BUCKETS))
    assert "edges at 13s and 14s" in text and "steps of 1s (7%)" in text
    assert "a p95 under 14s (+4%) is never shown slower than the target" in text


def test_templates_without_load_signals_are_warned_about(tmp_path: Path) -> None:
    """A copied template file from before load-matched judgement cannot measure the load:
    its latency gates could never pass, and validation says so."""
    original = Path(__file__).resolve().parents[1] / "gates" / "triton-trtllm.yaml"
    text = original.read_text().split("\n  # --- load per replica")[0] + "\n"
    copy = tmp_path / "old-triton.yaml"
    copy.write_text(text)
    data = example_dict()
    data["metrics"]["templates"] = str(copy)
    found = dict(_warnings(data))
    message = found["metrics.templates"]
    assert "defines neither load_requests_per_replica nor load_inflight_per_replica" in message
    assert "e2e_latency_p95 can never pass" in message
