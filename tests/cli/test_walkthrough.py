"""The README's *Try it by hand* works as written: its sh blocks run in order and end with the
rollout rolled back to the pinned set; the fleet's plans are the reference plans with only
the simulated fleet's fields changed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutd.planfile import load_plan
from rolloutd.sim.fleetdir import pointed_at_fleet

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SECTION = "## Try it by hand"
PLANS = ("atlas-70b-maxseq8192.yaml", "atlas-70b-staging.yaml")


def walkthrough_blocks(text: str) -> list[str]:
    """The ```sh blocks of the walkthrough section, in order."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"^```sh\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def without_sim_fields(plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` without the fields a plan copy may change (``SIM_FIELDS``: replica URLs,
    router, metrics), replica names kept."""
    rest = {key: value for key, value in plan.items() if key not in ("router", "metrics")}
    rest["gates"] = {
        name: {**gate, "sampled": {**gate["sampled"], "capture": None}}
        if "sampled" in gate
        else gate
        for name, gate in plan.get("gates", {}).items()
    }
    rest["pools"] = {
        pool: {**spec, "replicas": [{"name": r["name"]} for r in spec["replicas"]]}
        for pool, spec in plan["pools"].items()
    }
    return rest


@pytest.mark.parametrize("name", PLANS)
def test_a_plan_copy_changes_only_urls_router_and_metrics(name: str, tmp_path: Path) -> None:
    """Pointed at a fleet, a reference plan keeps every other field, still validates, and
    names the fleet's URLs, the file router and the file metrics source."""
    original = yaml.safe_load((REPO / "config" / "plans" / name).read_text())
    names = [r["name"] for pool in original["pools"].values() for r in pool["replicas"]]
    urls = {n: f"http://127.0.0.1:{18000 + i}" for i, n in enumerate(names)}
    copy = pointed_at_fleet(
        original,
        urls,
        weights=tmp_path / "w.json",
        metrics=tmp_path / "m.json",
        source=name,
        capture=tmp_path / "capture",
    )
    assert without_sim_fields(copy) == without_sim_fields(original)
    assert copy["router"]["driver"] == "file" and copy["router"]["path"] == str(tmp_path / "w.json")
    assert copy["metrics"] == {"source": "file", "path": str(tmp_path / "m.json")}
    assert sorted(r["url"] for p in copy["pools"].values() for r in p["replicas"]) == sorted(
        urls.values()
    )
    (tmp_path / name).write_text(yaml.safe_dump(copy))
    assert load_plan(tmp_path / name).plan.executor.kind == "triton"


@pytest.mark.slow
def test_the_walkthrough_runs_as_written_and_ends_rolled_back(tmp_path: Path) -> None:
    """Every command of the walkthrough exits 0; the rollout ends rolled_back after gpu-d was
    redeployed with the pinned stable set and verified; the fleet's plans are the reference
    plans with only the simulated fleet's fields changed."""
    blocks = walkthrough_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 4, "the walkthrough lost its sh blocks"
    # A clone's root, as far as the walkthrough reads it.
    for name in ("config", "gates"):
        (tmp_path / name).symlink_to(REPO / name)
    script = "\n".join(
        [
            "set -eE",
            "trap 'echo \"walkthrough: exit $? from: $BASH_COMMAND\" >&2' ERR",
            *blocks,
            "rolloutctl status 1 -o json > status.json",
            "rolloutctl history 1 -o json > history.json",
        ]
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ROLLOUTD_") and key != "VIRTUAL_ENV"
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        ROLLOUTD_ENV_FILE="/nonexistent",
        ROLLOUTD_HEALTH_PORT="0",  # other tests' daemons may hold the default port
    )
    started = time.monotonic()
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its background jobs share its process group
    )
    try:
        output, _ = shell.communicate(timeout=150)
    finally:
        # Whatever the script left behind (it stopped early, a job ignored SIGTERM).
        for sent in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(shell.pid, sent)
            except ProcessLookupError:
                break
            time.sleep(1.0)
        shell.wait()
    elapsed = time.monotonic() - started
    assert shell.returncode == 0, output[-6000:]
    assert "Traceback" not in output, output[-6000:]
    status = json.loads((tmp_path / "status.json").read_text())
    kinds = [event["kind"] for event in json.loads((tmp_path / "history.json").read_text())]
    assert status["state"] == "rolled_back" and status["weight"] == 0
    assert "rolled_back" in kinds, kinds
    deployed, verified = kinds.index("artefacts_deployed"), kinds.index("replica_verified")
    assert deployed < verified < kinds.index("rolled_back"), kinds
    for name in PLANS:
        original = yaml.safe_load((REPO / "config" / "plans" / name).read_text())
        copy = yaml.safe_load((tmp_path / "sim" / "plans" / name).read_text())
        assert without_sim_fields(copy) == without_sim_fields(original), name
        assert copy["router"]["driver"] == "file" and copy["metrics"]["source"] == "file"
    print(f"walkthrough: {elapsed:.1f} s")
