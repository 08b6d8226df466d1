"""Live traffic as a suite, end to end over HTTP: agent sessions through the simulated
fleet with the gateway's capture on, a day of it sampled with stable's answers as the
reference, and replayed to both pools by the suite gate's ``sampled`` source."""

from __future__ import annotations

import itertools
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.evaluation import records
from rolloutd.evaluation.capture import read_capture
from rolloutd.evaluation.runner import RunnerOptions
from rolloutd.evaluation.schedule import judge_stored, run_suite_for_gate
from rolloutd.gateway import Capture
from rolloutd.sim.traffic import TrafficGenerator
from tests.evaluation.conftest import fleet, start
from tests.store.seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle

_SERVICES = itertools.count()
SIM = RunnerOptions(concurrency=16, send_expected=True, timeout_s=10, retries=1)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 agent requests served by stable with the gateway capturing all of them."""
    directory = tmp_path_factory.mktemp("capture")
    replica = start("exact", pool="stable", seed=11)
    try:
        capture = Capture(directory, share=1.0, seed=2)
        TrafficGenerator(
            replica.url, concurrency=16, max_requests=600, capture=capture, time_scale=1e-5, seed=4
        ).run()
    finally:
        replica.stop()
    assert 590 <= capture.captured <= 600  # every answered request (one may time out)
    return directory


def _live_gate(plan: Plan, capture: Path, rule: str = "no_regression") -> SuiteGate:
    shadow = plan.gates["tool_args_no_regression"]
    assert isinstance(shadow, SuiteGate)
    sampled = {"capture": str(capture), "cases": 300, "min_cases": 50}
    return SuiteGate.model_validate(
        {**shadow.model_dump(exclude={"suite", "sampled"}), "rule": rule, "sampled": sampled}
    )


def _run(
    store: StoreHandle, plan: Plan, spec: SuiteGate, now: datetime, name: str = "live_gate"
) -> Any:
    """Run the gate once for a new rollout (of its own service: one runs per service)."""
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session, service=f"svc-{next(_SERVICES)}")
    evaluation = run_suite_for_gate(
        store.sessions,
        plan=plan,
        spec=spec,
        name=name,
        role="step",
        rollout_id=rollout_id,
        step_index=0,
        now=now,
        options=SIM,
    )
    return evaluation, rollout_id


def test_an_int4_like_canary_is_found_and_its_fields_named_on_live_traffic(
    store: StoreHandle, captured: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Replayed to an exact stable and an int4-like canary, the sampled cases fail the
    per-field rule and the reason names the fields; both pools were asked every case; no
    captured content reaches the logs, the reason or the evidence."""
    caplog.set_level(logging.DEBUG)
    now = datetime.now(UTC) + timedelta(seconds=1)
    with fleet("int4-like") as (plan, stable, canary):
        evaluation, rollout_id = _run(store, plan, _live_gate(plan, captured), now)
        asked = (stable.ledger.position(), canary.ledger.position())
    assert evaluation.verdict is Verdict.FAIL, evaluation.reason
    assert evaluation.reason.startswith("regressed: ")
    # Whole calls are worse; the reason names the arguments where the canary went wrong.
    worse = [row for row in evaluation.evidence["fields"] if row["canary_worse"] > 0]
    named = [row["field"] for row in worse if row["field"] != "(whole call)"]
    assert named and all("." in field for field in named)  # tool.argument
    top = max(worse[1:], key=lambda row: row["canary_worse"] - row["canary_better"])
    assert f"{top['field']} ({top['canary_worse']} vs {top['canary_better']})" in evaluation.reason
    assert min(asked) >= 300  # the sample, to both pools (a retry asks a case again)
    with store.sessions() as session:
        again = judge_stored(
            session,
            spec=_live_gate(plan, captured),
            name="live_gate",
            role="step",
            rollout_id=rollout_id,
            now=now,
        )
        stored = records.latest_run(session, rollout_id=rollout_id, role="baseline")
    assert again.verdict is Verdict.FAIL and stored is not None
    assert stored.suite_path == str(captured) and len(stored.cases) == 300
    contents = {
        message["content"]
        for record in read_capture(captured, since=now - timedelta(days=1), until=now).records
        for message in record.request["messages"]
        if message["role"] == "user"
    }
    said = caplog.text + evaluation.reason + json.dumps(evaluation.evidence, default=str)
    assert contents and not any(text in said for text in contents)


def test_with_both_pools_exact_the_live_sample_passes(store: StoreHandle, captured: Path) -> None:
    now = datetime.now(UTC) + timedelta(seconds=1)
    with fleet("exact") as (plan, _, _):
        for rule in ("no_regression", "max_drop"):
            evaluation, _ = _run(store, plan, _live_gate(plan, captured, rule), now)
            assert evaluation.verdict is Verdict.PASS, (rule, evaluation.reason)
            assert evaluation.evidence["calls"]["pairs"] == 300


def test_too_little_capture_is_inconclusive_with_the_counts_not_the_content(
    store: StoreHandle, captured: Path, tmp_path: Path
) -> None:
    """Outside the captured stretch, or from a directory that does not exist, the run is
    inconclusive and says why in counts; nothing is asked of the pools."""
    later = datetime.now(UTC) + timedelta(days=3)
    with fleet("exact") as (plan, stable, canary):
        evaluation, _ = _run(store, plan, _live_gate(plan, captured), later)
        missing, _ = _run(store, plan, _live_gate(plan, tmp_path / "nothing-here"), later)
        asked = (stable.ledger.position(), canary.ledger.position())
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert evaluation.reason == (
        f"live sample: {captured}: 0 usable captured case(s) in the last 1d, fewer than "
        "min_cases 50 (dropped: none)"
    )
    assert missing.verdict is Verdict.INCONCLUSIVE
    assert missing.reason == f"live sample: {tmp_path / 'nothing-here'}: no such capture directory"
    assert asked == (0, 0)
