"""plan validate warns about step gates that cannot pass at their step's load, names the
step that will judge them, and says how finely the latency histogram resolves the target;
``rolloutctl status`` shows the load the gates measured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rolloutd.core.loadmatch import resolution
from rolloutd.core.plan import LatencyGate, planned_load_ratio
from rolloutd.core.progress import Progress
from rolloutd.gates.load import Load, PoolLoad
from rolloutd.gateway import DURATION_BUCKETS
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.sim.stats import VLLM_LATENCY_BUCKETS
from rolloutd.store import queries
from tests.cli import Ctl
from tests.plans import example_dict, to_yaml

if TYPE_CHECKING:
    from conftest import StoreHandle


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
    assert field == "steps[2].gates[0]"
    assert "gate 'e2e_latency_p95' cannot pass at 5%" in message
    assert "carries 0.16 of a stable replica's load (1 canary, 3 stable)" in message
    assert "min_load_ratio 0.7" in message and "the step cannot complete on it" in message
    assert "steps[3] (canary 25%) is the first step to judge it, at load ratio 1.00" in message
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
    assert field == "steps[2].gates[4]" and "'timeouts_vs_stable' cannot pass at 5%" in message
    assert "buckets" not in message  # no histogram behind an event count


def test_without_a_step_that_reaches_the_load_the_warning_says_so() -> None:
    """Two canaries of four at 25% carry a third of a stable replica's load; a gate on that
    step alone is never judged before 100%."""
    data = example_dict()
    stable = data["pools"]["stable"]["replicas"]
    data["pools"]["canary"]["replicas"].append(stable.pop())
    data["router"]["servers"]["canary"].append(data["router"]["servers"]["stable"].pop())
    found = dict(_warnings(data))
    message = found["steps[3].gates[0]"]
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
    original = Path(__file__).resolve().parents[2] / "gates" / "triton-trtllm.yaml"
    text = original.read_text().split("\n  # --- load per replica")[0] + "\n"
    copy = tmp_path / "old-triton.yaml"
    copy.write_text(text)
    data = example_dict()
    data["metrics"]["templates"] = str(copy)
    found = dict(_warnings(data))
    message = found["metrics.templates"]
    assert "defines neither load_requests_per_replica nor load_inflight_per_replica" in message
    assert "e2e_latency_p95 can never pass" in message


def test_a_target_on_the_last_edge_is_never_shown_exceeded() -> None:
    """A 120 s target on the gateway's last finite edge: no edge above it to show a p95 past
    it, so the message says so instead of a step of 0 s."""
    gate = LatencyGate(kind="latency", signal="e2e_latency", target_seconds=120)
    text = resolution(gate, ("the agent gateway's default buckets", DURATION_BUCKETS))
    assert "stop at the 120s target" in text and "can never show the canary slower" in text
    assert "steps of" not in text


def test_coarse_engine_buckets_name_the_edges_around_the_target_and_the_step() -> None:
    """vLLM's latency edges (..., 10, 15, 20 s) at a 14 s target: the edges either side, the
    5 s step they tell p95s apart by, and the p95s under 15 s that never show slower."""
    gate = LatencyGate(kind="latency", signal="e2e_latency", target_seconds=14.0)
    text = resolution(gate, ("vLLM's latency buckets", VLLM_LATENCY_BUCKETS))
    assert text.startswith("At its 14s target vLLM's latency buckets have edges at 10s and 15s")
    assert "told apart there in steps of 5s (36%)" in text
    assert "a p95 under 15s (+7%) is never shown slower than the target" in text


# --- through rolloutctl ------------------------------------------------------------------------


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(to_yaml(data))
    return path


def test_plan_validate_prints_the_warning_and_still_accepts_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rolloutctl plan validate` on a plan gating latency at 5%: exit 0, one warning line
    naming file and field, the step that judges the gate and the buckets at the target."""
    path = _write(tmp_path, _latency_at_5_percent())
    code, out, _ = Ctl(capsys)("plan", "validate", str(path))
    warning, ok = out.strip().splitlines()
    assert (code, ok) == (0, f"{path}: ok")
    assert warning.startswith(
        f"{path}: warning: steps[2].gates[0]: gate 'e2e_latency_p95' cannot pass at 5%: "
        "a canary replica carries 0.16 of a stable replica's load (1 canary, 3 stable)"
    )
    assert "steps[3] (canary 25%) is the first step to judge it, at load ratio 1.00" in warning
    assert (
        "At its 14s target the agent gateway's default buckets have edges at 14s and 15s: "
        "p95s are told apart there in steps of 1s (7%)"
    ) in warning


def test_plan_validate_says_nothing_when_the_gate_takes_a_pass_at_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With min_load_ratio: 0 on the gate, the same plan validates with no warning at all."""
    data = _latency_at_5_percent()
    data["gates"]["e2e_latency_p95"]["min_load_ratio"] = 0
    path = _write(tmp_path, data)
    assert Ctl(capsys)("plan", "validate", str(path))[:2] == (0, f"{path}: ok\n")


def _load(canary_rps: float, stable_rps: float) -> dict[str, Any]:
    """The ``load`` evidence a gate stores at 25% (planned ratio 1), built as the analysis
    builds it."""
    return Load(
        canary=PoolLoad(canary_rps, 4.1),
        stable=PoolLoad(stable_rps, 3.9),
        ratio=canary_rps / stable_rps,
        basis="requests",
        unknown=None,
        window_seconds=3600.0,
        planned_ratio=1.0,
    ).as_evidence()


@pytest.fixture
def at_25_percent(store: StoreHandle, monkeypatch: pytest.MonkeyPatch) -> int:
    """A rollout of the reference plan running its 25% step, with rolloutctl pointed at its
    database; returns its id. Three of its gates measure the load: the latency gate (first
    in the status), a compare gate on queue timeouts (middle) and a latency threshold as a
    rollback trigger (last).

    Their newest evaluations: the latency gate's at 09:10 (load ratio 0.62; 0.5 at 09:05),
    the comparison's at 09:20 (0.81), the trigger's at 09:15 (0.75), and a threshold that
    measures no load at 09:30."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", store.url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    data = example_dict()
    data["gates"]["timeouts_vs_stable"] = {"kind": "compare", "signal": "queue_timeouts"}
    data["steps"][2]["gates"].append("timeouts_vs_stable")
    data["gates"]["very_slow"] = {"kind": "threshold", "signal": "e2e_latency", "max": 60.0}
    data["rollback"]["triggers"].append("very_slow")
    loaded = parse_plan(to_yaml(data), "plan.yaml")
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    with store.sessions.begin() as session:
        rollout_id = start_rollout(session, loaded, actor="alice", now=t0)
        progress = Progress(started_at=t0, step_index=2, step_entered_at=t0, step_verified_at=t0)
        queries.save_progress(
            session,
            queries.get_rollout(session, rollout_id),
            progress=progress.for_storage(),
            state="running",
            active=True,
            now=t0,
        )
        for minutes, gate, evidence in (
            (5, "e2e_latency_p95", {"load": _load(0.3, 0.6)}),
            (10, "e2e_latency_p95", {"load": _load(0.31, 0.5)}),
            (20, "timeouts_vs_stable", {"load": _load(0.42, 0.52)}),
            (15, "very_slow", {"load": _load(0.3, 0.4)}),
            (30, "queue_timeouts", {}),
        ):
            queries.record_evaluation(
                session,
                rollout_id=rollout_id,
                step_index=2,
                gate=gate,
                role="trigger" if gate == "very_slow" else "step",
                verdict="pending",
                value=None,
                threshold=None,
                query=None,
                samples=None,
                statistic=None,
                reason=None,
                evidence=evidence,
                evaluated_at=t0 + timedelta(minutes=minutes),
            )
    return rollout_id


def test_status_json_carries_the_newest_measured_load_and_each_gates_ratio(
    at_25_percent: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status -o json`: ``load`` is from the newest evaluation that measured it (the queue
    timeout comparison's: not the later threshold's without load, not the other gates'
    older ones), and each gate row carries the ratio its own newest evaluation saw."""
    view = Ctl(capsys).json("status", str(at_25_percent))
    load = view["load"]
    assert (load["gate"], load["ratio"], load["planned_ratio"]) == (
        "timeouts_vs_stable",
        pytest.approx(0.42 / 0.52),
        1.0,
    )
    assert load["canary"]["requests_per_s"] == 0.42 and load["stable"]["requests_per_s"] == 0.52
    assert load["evaluated_at"].startswith("2026-03-02T09:20:00")
    ratios = {g["name"]: g["load_ratio"] for g in view["gates"]}
    assert ratios["e2e_latency_p95"] == pytest.approx(0.62)
    assert ratios["timeouts_vs_stable"] == pytest.approx(0.42 / 0.52)
    assert ratios["very_slow"] == pytest.approx(0.75)
    assert ratios["queue_timeouts"] is None


def test_status_prints_the_load_line(
    at_25_percent: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table output has one line with both pools' load per replica, the ratio against
    the planned one, and the gate and time it was measured at."""
    code, out, _ = Ctl(capsys)("status", str(at_25_percent))
    (line,) = [line for line in out.splitlines() if line.startswith("load per replica")]
    assert code == 0
    assert line == (
        "load per replica: canary 0.42, stable 0.52 req/s; ratio 0.81 (planned 1.00)  "
        "(timeouts_vs_stable, 2026-03-02 09:20:00)"
    )


def test_status_without_a_measured_load_prints_no_load_line(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any gate has measured the load, the JSON's ``load`` is null and the table has
    no load line."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", store.url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    with store.sessions.begin() as session:
        loaded = parse_plan(to_yaml(example_dict()), "plan.yaml")
        rollout_id = start_rollout(session, loaded, actor="alice", now=datetime.now(UTC))
    ctl = Ctl(capsys)
    assert ctl.json("status", str(rollout_id))["load"] is None
    assert "load per replica" not in ctl("status", str(rollout_id))[1]
