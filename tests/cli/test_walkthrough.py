"""The README's *Try it by hand* works as written: its sh blocks run in order; the quick plan
completes, the production plan is rolled back to the pinned set through Triton, and the
second deployment's through its systemd executor on the simulated vLLM boxes; what
``rolloutctl sim fleet`` prints next are the README's commands; the fleet's plans are the
reference plans with only the simulated fleet's fields changed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutd.planfile import load_plan
from rolloutd.sim.fleetdir import pointed_at_fleet

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SECTION = "## Try it by hand"
DEPLOYMENTS = {
    "atlas-70b": (
        "atlas-70b-maxseq8192.yaml",
        "atlas-70b-staging.yaml",
        "atlas-70b-quick.yaml",
    ),
    "support-70b": ("support-70b-awq.yaml", "support-70b-staging.yaml"),
}
PLANS = tuple(name for names in DEPLOYMENTS.values() for name in names)
HINT = "next, in another shell from the same directory:"


def walkthrough_blocks(text: str) -> list[str]:
    """The ```sh blocks of the walkthrough section, in order."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"^```sh\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def readme_commands(text: str) -> list[str]:
    """The walkthrough's commands, one a line: continuations joined, comments and runs of
    spaces dropped."""
    commands = []
    for block in walkthrough_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = " ".join(re.sub(r"\s+#(\s.*)?$", "", line).split())
            if command:
                commands.append(command)
    return commands


def assert_hint_is_the_readmes(hint: list[str], commands: list[str]) -> None:
    """Each command of ``hint`` is one of ``commands`` (or begins it: the README may redirect
    its output), in the same order."""
    position = 0
    for said in hint:
        found = next(
            (
                i
                for i in range(position, len(commands))
                if commands[i] == said or commands[i].startswith(said + " ")
            ),
            None,
        )
        assert found is not None, f"the fleet says {said!r}; the README has not, in order"
        position = found + 1


def without_sim_fields(plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` without the fields a plan copy may change (``SIM_FIELDS``: replica URLs,
    router, metrics, sampled captures, a systemd executor's restart and env file), replica
    names kept."""
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
    if plan["executor"]["kind"] == "systemd":
        rest["executor"] = {**plan["executor"], "restart": None, "env_file": None}
    return rest


@pytest.mark.parametrize("name", PLANS)
def test_a_plan_copy_changes_only_the_sim_fields(name: str, tmp_path: Path) -> None:
    """Pointed at a fleet, a reference plan keeps every other field, still validates, and
    names the fleet's URLs, the file router, the file metrics source and, for a systemd
    executor, the fleet's restart command and environment file."""
    original = yaml.safe_load((REPO / "config" / "plans" / name).read_text())
    names = [r["name"] for pool in original["pools"].values() for r in pool["replicas"]]
    urls = {n: f"http://127.0.0.1:{18000 + i}" for i, n in enumerate(names)}
    restart = ["rolloutctl", "sim", "restart", "--url", "{url}", "--env-file", "f/{replica}"]
    copy = pointed_at_fleet(
        original,
        urls,
        weights=tmp_path / "w.json",
        metrics=tmp_path / "m.json",
        source=name,
        capture=tmp_path / "capture",
        restart=restart,
        env_file=tmp_path / "{replica}.env",
    )
    assert without_sim_fields(copy) == without_sim_fields(original)
    assert copy["router"]["driver"] == "file" and copy["router"]["path"] == str(tmp_path / "w.json")
    assert copy["metrics"] == {"source": "file", "path": str(tmp_path / "m.json")}
    assert sorted(r["url"] for p in copy["pools"].values() for r in p["replicas"]) == sorted(
        urls.values()
    )
    kind = original["executor"]["kind"]
    if kind == "systemd":
        assert copy["executor"]["restart"] == restart
        assert copy["executor"]["env_file"] == str(tmp_path / "{replica}.env")
    else:
        assert copy["executor"] == original["executor"]
    if "vllm" in (copy.get("capacity") or {}):
        # Its server YAML and model config sit beside the original (sim fleet copies them).
        copy["capacity"] = None
    (tmp_path / name).write_text(yaml.safe_dump(copy))
    assert load_plan(tmp_path / name).plan.executor.kind == kind


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh shell in a clone: this interpreter's commands first on
    PATH, no rolloutd settings, no env file, a free health port.

    ``rolloutctl`` and ``rolloutd`` there run this checkout (the systemd executor runs
    ``rolloutctl sim restart`` with PATH alone, so PYTHONPATH cannot say which copy)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ROLLOUTD_") and key != "VIRTUAL_ENV"
    }
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir(exist_ok=True)
    for command, module in (("rolloutctl", "ctl"), ("rolloutd", "daemon")):
        script = bin_dir / command
        script.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
            f"from rolloutd.cli.{module} import main\nsys.exit(main())\n"
        )
        script.chmod(0o755)
    path = os.pathsep.join(
        [str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
    )
    env.update(PATH=path, ROLLOUTD_ENV_FILE="/nonexistent", ROLLOUTD_HEALTH_PORT="0")
    return env


@contextmanager
def fleet_json(deployment: str, directory: Path, env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """``rolloutctl sim fleet --deployment D --dir DIR --agents 0 -o json`` at the clone's
    root: its ready line; stopped with SIGTERM afterwards."""
    process = subprocess.Popen(
        [
            "rolloutctl", "sim", "fleet", "--deployment", deployment, "--dir", str(directory),
            "--agents", "0", "-o", "json",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line, process.stderr.read()
        yield json.loads(line)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


@pytest.mark.parametrize("deployment", list(DEPLOYMENTS))
def test_sim_fleet_writes_the_plans_and_sets_and_prints_the_readmes_commands(
    deployment: str, tmp_path: Path
) -> None:
    """``sim fleet --deployment D -o json`` serves D's replicas, writes both sets to pin and a
    copy of each of D's plans that differs from its original in the sim fields only and
    validates, and its next commands are the README walkthrough's, in order."""
    env = clean_env(tmp_path)
    with fleet_json(deployment, tmp_path / "fleet", env) as data:
        assert data["deployment"] == deployment
        for name, artefact in data["artefacts"].items():
            assert Path(artefact["dir"]).is_dir() and Path(artefact["engine_config"]).is_file()
            assert f"artefact pin {name} " in " ".join(data["next"])
        for role, path in data["plans"].items():
            name = Path(path).name
            original = yaml.safe_load((REPO / "config" / "plans" / name).read_text())
            copy = yaml.safe_load(Path(path).read_text())
            assert without_sim_fields(copy) == without_sim_fields(original), role
            assert load_plan(path).plan.name == original["name"]
        assert sorted(Path(p).name for p in data["plans"].values()) == sorted(
            DEPLOYMENTS[deployment]
        )
        (tmp_path / "fleet" / "fleet.env").read_text()
    replicas = data["replicas"]
    if deployment == "support-70b":
        assert {n: (r["pool"], r["engine"]) for n, r in replicas.items()} == {
            "box-a": ("stable", "vllm"),
            "box-b": ("canary", "vllm"),
            "stg-a": ("stable", "vllm"),
            "stg-b": ("canary", "vllm"),
        }
        assert all("--engine vllm" in c for c in data["next"] if "artefact pin" in c)
        systemd = yaml.safe_load(Path(data["plans"]["production"]).read_text())["executor"]
        assert systemd["restart"][:3] == ["rolloutctl", "sim", "restart"]
        assert systemd["env_file"].startswith(data["dir"])
    else:
        assert sorted(replicas) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "stg-a", "stg-b"]
    readme_dir = "sim" if deployment == "atlas-70b" else "sim-support"
    hint = [c.replace(str(tmp_path / "fleet"), readme_dir) for c in data["next"]]
    assert_hint_is_the_readmes(hint, readme_commands(README.read_text(encoding="utf-8")))


def printed_hints(output: str) -> list[list[str]]:
    """The next commands each ``sim fleet`` of the walkthrough printed."""
    hints = []
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line == HINT:
            following = lines[index + 1 :]
            ended = next((i for i, x in enumerate(following) if not x.startswith("  ")), None)
            hints.append([x.strip() for x in following[:ended]])
    return hints


def read_json(path: Path) -> Any:
    """A JSON file the script wrote."""
    return json.loads(path.read_text())


def assert_rolled_back_by_redeploy(status: dict[str, Any], kinds: list[str]) -> None:
    """The rollout ended rolled_back at weight 0 after the canary was redeployed with the
    pinned stable set and verified."""
    assert status["state"] == "rolled_back" and status["weight"] == 0, status["state"]
    deployed, verified = kinds.index("artefacts_deployed"), kinds.index("replica_verified")
    assert deployed < verified < kinds.index("rolled_back"), kinds


@pytest.mark.slow
def test_the_walkthrough_runs_as_written_and_ends_as_it_says(tmp_path: Path) -> None:
    """Every command of the walkthrough exits 0; the quick plan completes at 100%; the
    production plan ends rolled_back after gpu-d was redeployed and verified; the support
    plan ends rolled_back after box-b's simulated vLLM was restarted by the systemd executor
    on the pinned GGUF set and verified; each fleet printed the README's next commands."""
    text = README.read_text(encoding="utf-8")
    blocks = walkthrough_blocks(text)
    assert len(blocks) >= 7, "the walkthrough lost its sh blocks"
    # A clone's root, as far as the walkthrough reads it.
    for name in ("config", "gates"):
        (tmp_path / name).symlink_to(REPO / name)
    atlas, support = (
        f"ROLLOUTD_DATABASE_URL=sqlite:///$PWD/{db}" for db in ("try.db", "try-support.db")
    )
    script = "\n".join(
        [
            "set -eE",
            "trap 'echo \"walkthrough: exit $? from: $BASH_COMMAND\" >&2' ERR",
            *blocks,
            f"{atlas} rolloutctl status 1 -o json > quick.json",
            f"{atlas} rolloutctl status 2 -o json > status.json",
            f"{atlas} rolloutctl history 2 -o json > history.json",
            f"{support} rolloutctl status 1 -o json > support-status.json",
            f"{support} rolloutctl history 1 -o json > support-history.json",
        ]
    )
    started = time.monotonic()
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its background jobs share its process group
    )
    try:
        output, _ = shell.communicate(timeout=300)
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

    quick = read_json(tmp_path / "quick.json")
    assert (quick["state"], quick["weight"]) == ("completed", 100)

    history = read_json(tmp_path / "history.json")
    assert_rolled_back_by_redeploy(
        read_json(tmp_path / "status.json"), [event["kind"] for event in history]
    )

    support = read_json(tmp_path / "support-history.json")
    assert_rolled_back_by_redeploy(
        read_json(tmp_path / "support-status.json"), [event["kind"] for event in support]
    )
    deployed = next(event for event in support if event["kind"] == "artefacts_deployed")
    assert "box-b redeployed the pinned set llama-3.1-70b-q4km-gguf" in deployed["detail"]
    env_file = (tmp_path / "sim-support" / "vllm" / "box-b.env").read_text()
    assert 'ROLLOUTD_ARTEFACT_SET="llama-3.1-70b-q4km-gguf"' in env_file

    hints = printed_hints(output)
    assert len(hints) == 2, output[-6000:]
    for hint in hints:
        assert_hint_is_the_readmes(hint, readme_commands(text))
    for names, directory in zip(DEPLOYMENTS.values(), ("sim", "sim-support"), strict=True):
        for name in names:
            original = yaml.safe_load((REPO / "config" / "plans" / name).read_text())
            copy = yaml.safe_load((tmp_path / directory / "plans" / name).read_text())
            assert without_sim_fields(copy) == without_sim_fields(original), name
            assert copy["router"]["driver"] == "file" and copy["metrics"]["source"] == "file"
    print(f"walkthrough: {elapsed:.1f} s")
