"""``rolloutctl plan check`` and the preflight of ``start``: the reference plan against the
simulated Triton fleet behind a real Prometheus, and a plan whose first-step gate reads a
series the engines do not export."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from rolloutd.deploy.catalog import pin
from rolloutd.sim.exposition import Flavor
from tests.cli import Ctl
from tests.deploy.helpers import CANARY_CONFIG, STABLE_CONFIG, pinned
from tests.e2e.stack import Stack
from tests.plans import example_dict

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _reference_plan(stack: Stack, tmp_path: Path, **metrics: Any) -> Path:
    """The reference plan, pointed at the stack's Prometheus (1 s scrapes), its live-traffic
    gates at an empty capture directory (the stack's agents are not captured)."""
    assert stack.prometheus is not None
    data = example_dict()
    data["metrics"].update(url=stack.prometheus.url, scrape_interval="1s", **metrics)
    capture = tmp_path / "capture"
    capture.mkdir(exist_ok=True)
    for gate in data["gates"].values():
        if "sampled" in gate:
            gate["sampled"]["capture"] = str(capture)
    path = tmp_path / "atlas-70b-maxseq8192.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def ctl(
    capsys: pytest.CaptureFixture[str], pg_store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> Ctl:
    """rolloutctl in-process on the test's Postgres."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", pg_store.url)
    return Ctl(capsys)


def test_the_reference_plan_checks_out_on_the_simulated_triton_fleet(
    stack_for: Callable[[Flavor], Stack], ctl: Ctl, tmp_path: Path
) -> None:
    """Every gate of the reference plan finds its series on both pools: nothing is absent,
    the table names each signal, and the exit code is 0."""
    stack = stack_for("triton")
    plan = _reference_plan(stack, tmp_path)
    code, out, _ = ctl("plan", "check", str(plan), "-o", "json")
    rows = _json_after_logs(out)
    assert code == 0, [r for r in rows if r["found"] != "ok"]
    assert {r["found"] for r in rows} <= {"ok", "no data yet"}
    assert [r for r in rows if r["found"] == "absent"] == []
    checked = {(r["gate"], r["pool"]) for r in rows}
    assert ("canary_oom", "canary") in checked and ("canary_oom", "stable") in checked
    assert any(r["found"] == "ok" and r["gate"] == "canary_oom" for r in rows)
    code, table, _ = ctl("plan", "check", str(plan))
    assert code == 0
    assert "queue_timeout_rate" in table and "oom_events" in table


def _json_after_logs(out: str) -> Any:
    """The JSON document rolloutctl printed, after the stack's daemon's log lines."""
    return json.loads(out[out.index("[\n") :])


def _pin_the_reference_sets(store: StoreHandle, tmp: Path) -> None:
    """Pin the reference plan's two artefact sets, as an operator does before a start."""
    now = datetime.now(UTC)
    with store.sessions.begin() as session:
        for name, config in (
            ("atlas-70b-fp8-msl32768", STABLE_CONFIG),
            ("atlas-70b-fp8-msl8192", CANARY_CONFIG),
        ):
            pin(session, pinned(tmp, name, config), now=now)


def test_an_absent_first_step_signal_exits_3_and_blocks_start_unless_forced(
    stack_for: Callable[[Flavor], Stack], ctl: Ctl, tmp_path: Path, pg_store: StoreHandle
) -> None:
    """A trigger that reads a series the fleet does not export (an engine too old for the
    template) is absent: plan check exits 3 naming it, start refuses, and start --force
    --reason starts the rollout with the override in its audit log."""
    stack = stack_for("triton")
    missing = (
        'sum(increase(nv_inference_request_failure{model="{model}",reason="QUEUE_TIMEOUT",'
        'pool="{pool}"}[{window}]))'
    )
    plan = _reference_plan(
        stack, tmp_path, overrides={"queue_timeout_rate": {"query": missing + " / 1"}}
    )
    code, out, _ = ctl("plan", "check", str(plan))
    assert code == 3
    assert 'no series for nv_inference_request_failure{model="atlas-70b",' in out
    code, _, err = ctl("start", str(plan), "--skip-drill", "--reason", "e2e")
    assert code == 3
    assert "can never be judged" in err and "queue_timeouts_breach" in err
    _pin_the_reference_sets(pg_store, tmp_path)
    code, out, err = ctl(
        "start", str(plan), "--force", "--skip-drill", "--reason", "e2e", "-o", "json"
    )
    assert code == 0, err
    rollout_id = json.loads(out[out.index("{\n") :])["id"]
    code, out, _ = ctl("history", str(rollout_id), "-o", "json")
    kinds = [e["kind"] for e in _json_after_logs(out)]
    assert "preflight_forced" in kinds
