"""Every demo scenario ends as it should, through the real daemon, in well under 90 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from rolloutd.demo.deployments import DEPLOYMENTS
from rolloutd.demo.run import run_demo
from rolloutd.demo.scenarios import SCENARIOS

pytestmark = pytest.mark.slow

# What rolls each fault back on the support deployment (its plan's triggers).
SUPPORT_CAUSES = {"latency": "ttft_breach", "oom": "canary_oom", "unfaithful": "faithfulness_drop"}
PAIRS = [(d, s) for d in DEPLOYMENTS for s in sorted(SCENARIOS) if d in SCENARIOS[s].deployments]


@pytest.mark.parametrize(("deployment", "name"), PAIRS)
def test_each_scenario_ends_as_expected(deployment: str, name: str) -> None:
    """On each deployment, happy completes at 100%; every fault ends rolled_back with the
    canary at 0%; no session is lost before it reaches a pool."""
    scenario = SCENARIOS[name]
    result = run_demo(
        scenario, speed=14400.0, seed=0, deployment=DEPLOYMENTS[deployment], timeout_s=150.0
    )
    assert result.state == scenario.expected, result.as_json()
    assert result.weight == (100 if scenario.expected == "completed" else 0)
    assert result.wall_seconds < 90
    # Every session reached a pool: none was reset at the splitter's door (a listen backlog
    # of 5 did that to a few sessions a run when traffic workers opened their connections).
    assert "unknown" not in result.traffic, result.traffic
    # A suite run still in flight when the rollout ended is cancelled after its last event.
    kinds = [e["kind"] for e in result.events if e["kind"] != "suite_run_cancelled"]
    if scenario.expected == "rolled_back":
        assert "rollback_started" in kinds and kinds[-1] == "rolled_back"
        assert result.rollback_cause
        if deployment == "support-70b":
            assert SUPPORT_CAUSES[name] in result.rollback_cause, result.rollback_cause
    else:
        assert "promoted" in kinds and kinds[-1] == "completed"
    print(f"{deployment} {name}: {result.state} in {result.wall_seconds:.1f} s")


def test_the_cli_prints_one_json_summary_and_exits_0() -> None:
    """`rolloutctl demo --output json` prints the summary object with the contract keys."""
    done = subprocess.run(
        [sys.executable, "-m", "rolloutd.cli.ctl", "demo", "--scenario", "timeouts", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert {"scenario", "state", "weight", "wall_seconds", "events"} <= set(summary)
    assert (summary["scenario"], summary["state"], summary["weight"]) == (
        "timeouts",
        "rolled_back",
        0,
    )
    assert "Traceback" not in done.stderr


def test_the_support_deployment_judges_ttft_at_matched_load_and_faithfulness(
    tmp_path: Path,
) -> None:
    """support-70b's happy run: at 5% on one box a pool, the TTFT gate passes at the load
    the canary carried and names every band stable carried that the canary never reached
    (which bands those are depends on how fast the simulated agents run: on a loaded
    machine stable may stay in the canary's band); the faithfulness suite runs on both
    boxes and passes; the rollout completes."""
    result = run_demo(
        SCENARIOS["happy"],
        speed=14400.0,
        deployment=DEPLOYMENTS["support-70b"],
        timeout_s=150.0,
        workdir=tmp_path,
    )
    assert result.state == "completed", result.as_json()
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'rolloutd.db'}")
    with engine.connect() as db:
        said = db.execute(
            sqlalchemy.text(
                "select gate, reason, evidence from gate_evaluations"
                " where gate in ('ttft_p95', 'faithfulness') and verdict = 'pass'"
            )
        ).all()
    engine.dispose()
    # At 100% there is no stable pool to match: the gate is judged against its threshold
    # alone, and that verdict carries no reason.
    matched = [
        (reason, _evidence(evidence)["matched_load"])
        for gate, reason, evidence in said
        if gate == "ttft_p95" and reason is not None
    ]
    assert matched, said
    for reason, evidence in matched:
        assert reason.startswith("no slower than stable at matched load"), reason
        unreached = evidence["unreached"]
        if unreached:
            assert reason.endswith(
                f"not judged at {', '.join(unreached)}: the canary never carried that load"
            ), (reason, unreached)
        else:
            assert "never carried" not in reason, reason
    assert any(gate == "faithfulness" for gate, _, _ in said), said


def _evidence(stored: str | dict[str, Any]) -> dict[str, Any]:
    """A stored evidence column: JSON text on SQLite."""
    return json.loads(stored) if isinstance(stored, str) else stored


def test_a_scenario_of_the_other_deployment_is_refused_naming_the_option() -> None:
    """--scenario schema on support-70b (no schema gate there): exit 2, the scenarios it has."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rolloutd.cli.ctl",
            "demo",
            "--deployment",
            "support-70b",
            "--scenario",
            "schema",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    assert "--scenario: 'schema' is not a scenario of support-70b" in done.stderr
    assert "happy, latency, oom, unfaithful" in done.stderr
    assert "Traceback" not in done.stderr
