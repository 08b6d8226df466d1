"""The systemd executor against a vLLM unit: env file, restart, /health, /v1/models, digests.

There is no running systemd in the test container (``systemctl --user`` cannot reach a
manager, and ``systemd --user`` exits at once), so the unit is run by a faithful stand-in:
``standin_systemctl.py`` put first on PATH as ``systemctl`` reads the real unit file from
``$XDG_RUNTIME_DIR/systemd/user``, its ``EnvironmentFile=`` with systemd's syntax at every
start and expands ``ExecStart`` as systemd does; the service is ``sim_vllm_serve.py``, a
``vllm serve`` look-alike serving rolloutd's simulated vLLM replica, which names its model
in ``/v1/models`` from the path and ``--served-model-name`` it was started with.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rolloutd.core.plan import Replica, SystemdExecutor
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import Executor
from rolloutd.deploy.drills import run_drill
from rolloutd.deploy.executors import build_executor
from rolloutd.deploy.memory import MemoryExecutor
from rolloutd.deploy.systemd import (
    SystemdDeployer,
    env_file_text,
    read_env_file,
    write_atomically,
)
from tests.routers.services import free_port

from .helpers import pinned, plan_for
from .standin_systemctl import _environment_file, _expand

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STABLE = {"max_model_len": 8192, "gpu_memory_utilization": 0.92, "enable_prefix_caching": True}
CANARY = {"max_model_len": 8192, "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8"}


@dataclass
class Box:
    """One vLLM box: its unit, env file, URL and the stand-in systemctl's state."""

    unit_file: Path
    env_file: Path
    url: str
    tmp: Path

    def write_unit(self, exec_start: str) -> None:
        """(Re)write the unit with ``exec_start``; the env file and PYTHONPATH stay."""
        self.unit_file.write_text(
            "[Unit]\nDescription=vLLM (simulated)\n\n[Service]\nType=exec\n"
            f"EnvironmentFile={self.env_file}\nEnvironment=PYTHONPATH={ROOT}\n"
            f"ExecStart={exec_start}\nRestart=on-failure\n"
        )

    def main_pid(self) -> int:
        """The unit's MainPID, as ``systemctl --user show -p MainPID`` reports it."""
        out = subprocess.run(
            ["systemctl", "--user", "show", "-p", "MainPID", "vllm.service"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return int(out.strip().split("=")[1])

    def spec(self, **more: Any) -> SystemdExecutor:
        """The executor section for this box."""
        return SystemdExecutor.model_validate(
            {
                "kind": "systemd",
                "unit": "vllm.service",
                "env_file": str(self.env_file),
                "poll_interval": "50ms",
                "health_deadline": "20s",
                **more,
            }
        )


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Box]:
    """A vLLM unit under the stand-in systemctl, serving on a free port; stopped after."""
    bin_dir, run = tmp_path / "bin", tmp_path / "run"
    for directory in (bin_dir, run / "systemd" / "user"):
        directory.mkdir(parents=True)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "standin_systemctl.py"} "$@"\n')
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    port = free_port()
    box = Box(run / "systemd" / "user" / "vllm.service", tmp_path / "vllm.env",
              f"http://127.0.0.1:{port}", tmp_path)  # fmt: skip
    box.write_unit(
        f"{sys.executable} {HERE / 'sim_vllm_serve.py'} ${{VLLM_MODEL}} --port {port} $VLLM_ARGS"
    )
    yield box
    subprocess.run(["systemctl", "--user", "stop", "vllm.service"], check=False)


@pytest.fixture
def sets(tmp_path: Path) -> tuple[PinnedSet, PinnedSet]:
    """The stable (GGUF-like) and canary sets, pinned from trees under tmp_path."""
    return (
        pinned(tmp_path, "q4km", STABLE, engine="vllm"),
        pinned(tmp_path, "awq", CANARY, engine="vllm"),
    )


def test_a_deploy_writes_the_env_file_restarts_the_unit_and_waits_for_the_model(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """Stable, then canary: each restart serves the set named in the env file; verify
    finds health, the model name, the pinned digest and the files all agree."""
    stable, canary = sets
    deployer = SystemdDeployer(box.spec())
    replica = Replica(name="box-a", url=box.url)
    first = deployer.deploy(replica, stable)
    assert (first.ok, first.changed, first.exit_status) == (True, True, 0), first.reason
    written = read_env_file(box.env_file.read_text())
    assert written["ROLLOUTD_ARTEFACT_DIGEST"] == stable.digest
    assert written["VLLM_MODEL"] == stable.root
    assert written["VLLM_ARGS"] == (
        "--enable-prefix-caching --gpu-memory-utilization 0.92 --max-model-len 8192"
    )
    check = deployer.verify(replica, stable)
    assert (check.ok, check.healthy, check.digest_ok) == (True, True, True), check.reason
    pid = box.main_pid()
    second = deployer.deploy(replica, canary)
    assert second.ok and second.changed, second.reason
    assert box.main_pid() != pid
    assert deployer.verify(replica, canary).ok
    stale = deployer.verify(replica, stable)
    assert not stale.ok and f"not the pinned {stable.root}" in stale.reason


def test_deploying_the_set_it_serves_restarts_nothing(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The same env file and the engine naming the model: no restart, changed False."""
    stable, _ = sets
    deployer = SystemdDeployer(box.spec())
    replica = Replica(name="box-a", url=box.url)
    assert deployer.deploy(replica, stable).ok
    pid = box.main_pid()
    again = deployer.deploy(replica, stable)
    assert (again.ok, again.changed) == (True, False)
    assert again.reason == "already serving q4km"
    assert box.main_pid() == pid


def test_a_unit_that_fails_to_start_fails_the_deploy_with_systemctls_message(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """An ExecStart binary that does not exist: the restart job fails, its status and
    message are the deploy's reason."""
    box.write_unit("/opt/vllm/bin/no-such-vllm serve ${VLLM_MODEL}")
    result = SystemdDeployer(box.spec()).deploy(Replica(name="box-a", url=box.url), sets[0])
    assert (result.ok, result.exit_status) == (False, 1)
    assert "systemctl --user restart vllm.service exited with status 1: Job for vllm.service " in (
        result.reason
    )


def test_an_engine_naming_another_model_fails_at_once(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The unit ignores the env file's arguments and serves another name: the deploy says
    what /v1/models named instead of waiting out the deadline."""
    port = box.url.rsplit(":", 1)[1]
    box.write_unit(
        f"{sys.executable} {HERE / 'sim_vllm_serve.py'} ${{VLLM_MODEL}} --port {port} "
        "--served-model-name llama-3.1-70b-q4km"
    )
    deployer = SystemdDeployer(box.spec(served_model_name="llama-3.1-70b-awq"))
    result = deployer.deploy(Replica(name="box-a", url=box.url), sets[1])
    assert not result.ok
    assert result.reason.endswith(
        "/v1/models names llama-3.1-70b-q4km, not the pinned llama-3.1-70b-awq"
    )
    assert result.duration_s < 15


def test_a_changed_file_fails_verification_on_its_digest(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """A file of the model directory edited after the deploy: healthy, but digest_ok False."""
    stable, _ = sets
    deployer = SystemdDeployer(box.spec())
    replica = Replica(name="box-a", url=box.url)
    assert deployer.deploy(replica, stable).ok
    (Path(stable.root) / "config.json").write_text('{"build": "tampered"}')
    check = deployer.verify(replica, stable)
    assert (check.ok, check.healthy, check.digest_ok) == (False, True, False)
    assert "differ from q4km" in check.reason


def test_an_env_file_pinning_another_set_fails_verification(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """Someone rewrote the env file by hand: verify names the digest it pins instead."""
    stable, canary = sets
    deployer = SystemdDeployer(box.spec(served_model_name="llama"))
    replica = Replica(name="box-a", url=box.url)
    assert deployer.deploy(replica, stable).ok
    box.env_file.write_text(env_file_text(canary, "llama"))
    check = deployer.verify(replica, stable)
    assert check.digest_ok is False
    assert f"pins {canary.digest}, not q4km" in check.reason


def test_an_engine_that_never_answers_times_out(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The unit starts a process that never listens: the deploy fails at its timeout,
    saying the engine is not healthy."""
    box.write_unit("/bin/sleep 300")
    result = SystemdDeployer(box.spec()).deploy(
        Replica(name="box-a", url=box.url), sets[0], timeout=1.5
    )
    assert not result.ok
    assert "restarted, but not healthy: GET " in result.reason
    assert 1.5 <= result.duration_s < 5


def test_an_engine_argument_with_spaces_is_refused_before_anything_changes(
    box: Box, tmp_path: Path
) -> None:
    """systemd would split it; nothing is written and nothing restarted."""
    bad = pinned(tmp_path, "bad", {"chat_template": "a b"}, engine="vllm")
    result = SystemdDeployer(box.spec()).deploy(Replica(name="box-a", url=box.url), bad)
    assert not result.ok and "chat_template" in result.reason
    assert not box.env_file.exists()


def test_the_env_file_reads_back_through_systemds_syntax(tmp_path: Path) -> None:
    """Quotes, backslashes and spaces in the model path survive; $VLLM_ARGS splits into
    words, ${VLLM_MODEL} does not."""
    odd = pinned(tmp_path / 'we"ird \\dir', "odd", {"max_model_len": 4096}, engine="vllm")
    env = _environment_file(env_file_text(odd, None))
    assert env["VLLM_MODEL"] == odd.root
    argv = _expand("/usr/bin/vllm serve ${VLLM_MODEL} $VLLM_ARGS", env)
    assert argv == ["/usr/bin/vllm", "serve", odd.root, "--max-model-len", "4096"]


def test_a_plan_builds_the_systemd_executor_and_refuses_unknown_placeholders() -> None:
    """kind: systemd in a plan is the SystemdDeployer; {host} is no placeholder."""
    executor = {"kind": "systemd", "unit": "vllm@{replica}.service", "env_file": "/etc/{replica}"}
    plan = plan_for(executor, ["http://127.0.0.1:9"])
    assert isinstance(build_executor(plan), SystemdDeployer)
    with pytest.raises(ValueError, match=r"restart\[1\] names \['host'\]"):
        SystemdExecutor.model_validate({**executor, "restart": ["ssh", "{host}", "{unit}"]})


@pytest.mark.parametrize("kind", ["memory", "systemd"])
def test_the_twin_and_the_unit_keep_the_same_contract(
    kind: str, box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """Deploy then verify passes; verifying a set that was not deployed fails."""
    stable, canary = sets
    executor: Executor = MemoryExecutor() if kind == "memory" else SystemdDeployer(box.spec())
    replica = Replica(name="box-a", url=box.url)
    assert executor.deploy(replica, stable).ok
    assert executor.verify(replica, stable).ok
    assert not executor.verify(replica, canary, timeout=0.5).ok


def test_the_env_file_is_replaced_whole_and_readable_only_by_its_owner(tmp_path: Path) -> None:
    """An existing file is replaced by rename (a new inode), mode 0600, no temporary left."""
    target = tmp_path / "vllm.env"
    target.write_text("OLD=1\n")
    before = target.stat().st_ino
    write_atomically(target, "NEW=2\n")
    assert target.read_text() == "NEW=2\n"
    assert target.stat().st_ino != before
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["vllm.env"]


def test_a_drill_through_the_unit_ends_on_the_stable_set(
    box: Box, sets: tuple[PinnedSet, PinnedSet]
) -> None:
    """The staging drill a production start needs: canary deployed and verified, then the
    rollback to stable deployed and verified, all through systemctl and the env file."""
    stable, canary = sets
    executor = {"kind": "systemd", "unit": "vllm.service", "env_file": str(box.env_file),
                "poll_interval": "50ms", "health_deadline": "20s"}  # fmt: skip
    plan = plan_for(executor, [box.url], stable=stable.name, canary=canary.name)
    outcome = run_drill(plan, stable, canary, build_executor(plan))
    assert outcome.passed, outcome.reason
    assert [(s.phase, s.action, s.set_name) for s in outcome.steps] == [
        ("forward", "deploy", "awq"),
        ("forward", "verify", "awq"),
        ("rollback", "deploy", "q4km"),
        ("rollback", "verify", "q4km"),
    ]
    assert read_env_file(box.env_file.read_text())["ROLLOUTD_ARTEFACT_DIGEST"] == stable.digest
