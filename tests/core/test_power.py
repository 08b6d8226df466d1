"""plan validate says when a compare gate's steps are too short to see the regression its
``detect`` names: the chance its final look has, held against the gate's own final look on
simulated counts, and the bake that would reach the power asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutd.core.power import Stretch, final_look_power, minutes_needed
from rolloutd.core.stats.rates import compare_rates
from rolloutd.core.stats.stratified import Tally
from rolloutd.errors import BadInput
from rolloutd.planfile import parse_plan
from tests.cli import Ctl
from tests.plans import EXAMPLE_PATH, example_dict, to_yaml

ALPHA, SHARE = 0.05, 0.2


def _simulated_power(
    stretches: list[Stretch], per_minute: float, p0: float, p1: float, runs: int, seed: int
) -> tuple[float, float]:
    """How often the gate's final look (and the gate, either test) rejects on binomial
    sessions arriving as Poisson, each step cut into 8 blocks as the gate cuts it."""
    rng = np.random.default_rng(seed)
    final = either = 0
    for _ in range(runs):
        steps = []
        for stretch in stretches:
            blocks = []
            for _ in range(8):
                n = int(rng.poisson(per_minute * stretch.minutes / 8))
                canary = int(rng.binomial(n, stretch.share))
                blocks.append(
                    Tally(
                        float(rng.binomial(canary, p1)),
                        float(canary),
                        float(rng.binomial(n - canary, p0)),
                        float(n - canary),
                    )
                )
            steps.append(blocks)
        result = compare_rates(
            steps, alpha=ALPHA, sequential_share=SHARE, final=steps, clustered=False, looks=True
        )
        assert result.final is not None
        final += result.final.reject
        either += result.final.reject or result.sequential.reject
    return final / runs, either / runs


@pytest.mark.parametrize(
    ("per_minute", "minutes", "p0", "p1"),
    [
        (100, (100, 100), 0.05, 0.06),  # the gate benchmark's traffic: about two in three
        (30, (120, 120), 0.05, 0.06),  # a third
        (12, (600, 600), 0.01, 0.02),  # nineteen in twenty
    ],
)
def test_the_power_is_the_gates_own_final_look_on_simulated_sessions(
    per_minute: float, minutes: tuple[float, float], p0: float, p1: float
) -> None:
    """Within 4 points of how often the gate's final look rejects over 1,500 seeded
    rollouts (binomial sd there is at most 1.3 points); the gate as a whole (the every-tick
    test too) rejects at least as often, less the same noise."""
    stretches = [Stretch(0.05, minutes[0]), Stretch(0.25, minutes[1])]
    predicted = final_look_power(
        stretches,
        units_per_minute=per_minute,
        baseline=p0,
        regressed=p1,
        alpha=ALPHA * (1 - SHARE),
    )
    final, either = _simulated_power(stretches, per_minute, p0, p1, runs=1500, seed=7)
    assert abs(predicted - final) <= 0.04, (predicted, final)
    assert either >= predicted - 0.04


def test_no_regression_has_the_power_of_alpha() -> None:
    """With the canary at stable's rate the look rejects at its level, whatever the traffic."""
    for per_minute in (1, 100, 10_000):
        power = final_look_power(
            [Stretch(0.05, 60), Stretch(0.25, 60)],
            units_per_minute=per_minute,
            baseline=0.05,
            regressed=0.05,
            alpha=0.04,
        )
        assert power == pytest.approx(0.04)


def test_the_needed_bake_reaches_the_power_and_no_shorter_one_does() -> None:
    """minutes_needed is the shortest last step (to the minute) at the target power, the
    earlier step as it is; beyond the longest bake it says None."""
    odds: dict[str, Any] = {
        "units_per_minute": 30,
        "baseline": 0.05,
        "regressed": 0.06,
        "alpha": 0.04,
    }
    stretches = [Stretch(0.05, 120), Stretch(0.25, 120)]
    needed = minutes_needed(stretches, 0.8, **odds)
    assert needed is not None and needed > 120
    at = [stretches[0], Stretch(0.25, needed)]
    before = [stretches[0], Stretch(0.25, needed - 1.5)]
    assert final_look_power(at, **odds) >= 0.8 > final_look_power(before, **odds)
    # Twice the dispersion needs twice the information r (1 - r) T of both steps together:
    # the 25% step makes up the 5% one's share as well as its own.
    clustered = minutes_needed(stretches, 0.8, **odds | {"dispersion": 2.0})
    first, last = 0.05 * 0.95, 0.25 * 0.75
    expected = 2 * needed + 120 * first / last
    assert clustered is not None and clustered == pytest.approx(expected, rel=0.01)
    assert minutes_needed(stretches, 0.8, **odds | {"units_per_minute": 0.001}) is None


def _with_traffic(
    per_minute: float, bakes: tuple[str, str] = ("48h", "48h"), **detect: Any
) -> dict[str, Any]:
    data = example_dict()
    data["traffic"] = {"sessions_per_minute": per_minute, "requests_per_session": 15}
    gate = data["gates"]["escalations_not_rising"]
    gate["detect"] = {"from": 0.05, "to": 0.06, **detect}
    data["steps"][1]["bake"], data["steps"][2]["bake"] = bakes
    return data


def _warnings(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(w.field, w.message) for w in parse_plan(to_yaml(data), "plan.yaml").warnings]


def test_the_reference_plan_gives_its_escalation_gate_the_power_it_asks() -> None:
    """As shipped: 12 sessions/min over two 48h steps see 5% -> 6% in 99% of rollouts."""
    assert _warnings(example_dict()) == []
    assert _warnings(_with_traffic(12)) == []


def test_steps_too_short_for_the_regression_are_named_with_the_bake_they_need() -> None:
    """Two 2h steps at 12 sessions/min give 19%; the message names the weights, the traffic,
    the chance, the power asked, and the bake of the 25% step that reaches it."""
    ((field, message),) = _warnings(_with_traffic(12, ("2h", "2h")))
    assert field == "gates.escalations_not_rising.detect"
    assert message.startswith(
        "at 5% then 25% of 12 sessions/min its steps give this gate 4h to see escalations "
        "5% -> 6%: a 19% chance at its final look, under the 80% asked; steps[3].bake needs ~"
    )
    needed = message.split("steps[3].bake needs ~")[1].split(" ")[0]
    assert needed == "1d1h"  # 1,498 minutes, rounded up to the hour past a day
    assert message.endswith("(it is 2h)")
    assert "independent requests" not in message  # escalations come once per session


def test_a_regression_out_of_reach_says_what_would_help() -> None:
    """0.1 sessions/min cannot see 5% -> 6% within 60 days at 25%: raise the weight, or
    detect a larger regression."""
    ((_, message),) = _warnings(_with_traffic(0.1))
    assert "even a 60d bake at steps[3] would not reach it" in message
    assert message.endswith("raise the weight, or detect a larger regression")


def test_a_request_level_gate_says_it_assumed_independent_requests() -> None:
    """Schema violations per tool call cluster in sessions: the power counts requests
    (15 a session) and says that it assumed them independent until a dispersion is given."""
    data = _with_traffic(12, ("2h", "2h"))
    data["gates"]["schema_rising"] = {
        "kind": "compare",
        "signal": "schema_violations",
        "detect": {"from": 0.003, "to": 0.004},
    }
    data["steps"][1]["gates"].append("schema_rising")
    found = dict(_warnings(data))
    message = found["gates.schema_rising.detect"]
    assert "set detect.dispersion" in message
    data["gates"]["schema_rising"]["detect"]["dispersion"] = 3.0
    assert "set detect.dispersion" not in dict(_warnings(data))["gates.schema_rising.detect"]
    # One step (5%) carries it: its bake is the one named.
    assert "at 5% of 12 sessions/min" in message and "steps[2].bake needs ~" in message


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        (
            lambda d: d.pop("traffic"),
            "gates.escalations_not_rising.detect",
            "needs the plan's 'traffic: {sessions_per_minute: ...}' to be checked",
        ),
        (
            lambda d: d["gates"]["escalations_not_rising"]["detect"].update({"to": 0.04}),
            "gates.escalations_not_rising.detect",
            "'to' (0.04) must be above 'from' (0.05)",
        ),
        (
            lambda d: d["gates"]["escalations_not_rising"]["detect"].update({"from": 1.5}),
            "gates.escalations_not_rising.detect.from",
            "less than 1",
        ),
        (
            lambda d: d["gates"]["escalations_not_rising"]["detect"].update({"power": 1}),
            "gates.escalations_not_rising.detect.power",
            "less than 1",
        ),
        (
            lambda d: d["gates"]["escalations_not_rising"].update({"final_look": False}),
            "gates.escalations_not_rising.detect",
            "needs the gate's final look (final_look: false)",
        ),
        (
            lambda d: d["traffic"].update({"sessions_per_minute": 0}),
            "traffic.sessions_per_minute",
            "greater than 0",
        ),
        (
            lambda d: d["traffic"].update({"sessions_per_minute": "lots"}),
            "traffic.sessions_per_minute",
            "number",
        ),
        (
            lambda d: d["traffic"].update({"requests": 15}),
            "traffic.requests",
            "unknown key",
        ),
    ],
)
def test_a_detect_that_cannot_be_checked_is_refused_naming_the_field(
    change: Any, field: str, expected: str
) -> None:
    data = _with_traffic(12)
    change(data)
    with pytest.raises(BadInput) as info:
        parse_plan(to_yaml(data), "plan.yaml")
    problems = {p.field: p.message for p in info.value.problems}
    assert field in problems, problems
    assert expected in problems[field].lower()


def test_a_detect_on_a_gate_no_step_carries_is_refused() -> None:
    """A rollback trigger has no final look, so nothing answers its detect."""
    data = _with_traffic(12)
    for step in data["steps"]:
        if "escalations_not_rising" in step.get("gates", []):
            step["gates"].remove("escalations_not_rising")
    data["rollback"]["triggers"].append("escalations_not_rising")
    with pytest.raises(BadInput) as info:
        parse_plan(to_yaml(data), "plan.yaml")
    (problem,) = info.value.problems
    assert problem.field == "gates.escalations_not_rising.detect"
    assert "no step carries the gate" in problem.message


@pytest.fixture
def offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Ctl:
    """rolloutctl with no database: plan validate opens none."""
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


def test_plan_validate_prints_the_power_warning_and_still_passes(
    offline: Ctl, tmp_path: Path
) -> None:
    """The warning is a warning: exit 0, on stdout as text and in the JSON's warnings."""
    text = EXAMPLE_PATH.read_text()
    assert "bake: 48h" in text
    plan = tmp_path / "short.yaml"
    plan.write_text(text.replace("bake: 48h", "bake: 2h"))
    code, out, _ = offline("plan", "validate", str(plan))
    assert code == 0
    assert f"{plan}: warning: gates.escalations_not_rising.detect: at 5% then 25%" in out
    code, out, _ = offline("plan", "validate", str(plan), "-o", "json")
    assert code == 0
    (result,) = json.loads(out)
    assert result["ok"] is True
    (warning,) = result["warnings"]
    assert warning["field"] == "gates.escalations_not_rising.detect"
    assert "a 19% chance" in warning["message"]
