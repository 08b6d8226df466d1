"""The command executor: operators' scripts, their environment, timeouts and output."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rolloutd.core.plan import CommandExecutor, Replica
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.command import CommandDeployer
from rolloutd.deploy.executors import build_executor
from rolloutd.redact import register_secret
from rolloutd.sim.engine import Replica as SimReplica

from .helpers import CANARY_CONFIG, STABLE_CONFIG, pinned, plan_for, python_script

REPLICA = Replica(name="gpu-d", url="http://127.0.0.1:9")


def deployer(argv: list[str], **spec: object) -> CommandDeployer:
    """A command executor for ``argv`` with a short kill grace, so tests stay fast."""
    executor = CommandExecutor.model_validate({"kind": "command", "argv": argv, **spec})
    return CommandDeployer(executor, kill_grace=0.2)


@pytest.fixture
def canary(tmp_path: Path) -> PinnedSet:
    """The canary set, pinned from a tree under tmp_path."""
    return pinned(tmp_path, "build-new", CANARY_CONFIG, engine="vllm")


def test_the_script_gets_the_set_in_argv_and_environment_and_nothing_secret(
    tmp_path: Path, canary: PinnedSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placeholders are filled, ROLLOUTD_* describe the set, the database URL stays behind."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", "postgresql://rolloutd:hunter2@db/rolloutd")
    seen = tmp_path / "seen.json"
    argv = python_script(
        tmp_path / "deploy.py",
        "import json, os, sys\n"
        "manifest = json.load(open(os.environ['ROLLOUTD_ARTEFACT_MANIFEST']))\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ), 'manifest': manifest}},"
        f" open({str(seen)!r}, 'w'))\n",
    )
    result = deployer([*argv, "{replica}", "{set}", "{digest}"], env={"UNIT": "trtllm@1"}).deploy(
        REPLICA, canary
    )
    assert result.ok and result.exit_status == 0, result.reason
    recorded = json.loads(seen.read_text())
    assert recorded["argv"] == ["gpu-d", "build-new", canary.digest]
    env = recorded["env"]
    assert env["ROLLOUTD_REPLICA"] == "gpu-d"
    assert env["ROLLOUTD_REPLICA_URL"] == REPLICA.url
    assert env["ROLLOUTD_ARTEFACT_DIGEST"] == canary.digest
    assert env["ROLLOUTD_ARTEFACT_ROOT"] == canary.root
    assert env["ROLLOUTD_ENGINE"] == "vllm"
    assert json.loads(env["ROLLOUTD_ENGINE_CONFIG"]) == CANARY_CONFIG
    assert {f["path"] for f in json.loads(env["ROLLOUTD_ARTEFACT_FILES"])} == {
        f.path for f in canary.files
    }
    assert env["UNIT"] == "trtllm@1"
    assert "ROLLOUTD_DATABASE_URL" not in env
    assert not any("hunter2" in value for value in env.values())
    assert recorded["manifest"] == canary.manifest()


def test_exit_status_and_the_output_tail_are_recorded(tmp_path: Path, canary: PinnedSet) -> None:
    """A failing script: ok False, its status, the last 4 KiB of its output."""
    argv = python_script(
        tmp_path / "fail.py",
        "import sys\nfor i in range(5000): print(f'line {i}')\n"
        "sys.stdout.flush()\nprint('rsync: connection refused', file=sys.stderr)\nsys.exit(3)\n",
    )
    result = deployer(argv).deploy(REPLICA, canary)
    assert (result.ok, result.exit_status, result.timed_out) == (False, 3, False)
    assert result.reason.endswith("exited with status 3")
    assert result.output_tail.endswith("line 4999\nrsync: connection refused\n")
    assert len(result.output_tail.encode()) <= 4096 + len("…".encode())
    assert result.output_tail.startswith("…")


def test_a_hanging_script_and_its_children_are_killed_at_the_timeout(
    tmp_path: Path, canary: PinnedSet
) -> None:
    """The script ignores SIGTERM and leaves a child running; both are gone after the deploy."""
    pid_file = tmp_path / "child.pid"
    argv = python_script(
        tmp_path / "hang.py",
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('waiting for the engine', flush=True)\n"
        "time.sleep(300)\n",
    )
    started = time.monotonic()
    result = deployer(argv, timeout="1s").deploy(REPLICA, canary)
    took = time.monotonic() - started
    assert (result.ok, result.timed_out) == (False, True)
    assert "did not finish within 1 s" in result.reason
    assert result.output_tail == "waiting for the engine\n"
    assert took < 4
    child = int(pid_file.read_text())
    assert _gone(child)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True
        if status == "Z":
            return True
        time.sleep(0.02)
    return False


def test_a_missing_executable_is_a_failed_deploy_not_an_exception(canary: PinnedSet) -> None:
    """The script is not installed on this host: ok False with the reason."""
    result = deployer(["/nonexistent/deploy-engine", "{replica}"]).deploy(REPLICA, canary)
    assert not result.ok
    assert result.reason == "cannot run /nonexistent/deploy-engine: No such file or directory"


def test_known_secrets_are_scrubbed_from_the_output_tail(tmp_path: Path, canary: PinnedSet) -> None:
    """A script that echoes a registered secret leaves *** in the record."""
    register_secret("s3cr3t-webhook-token")
    argv = python_script(tmp_path / "leak.py", "print('token=s3cr3t-webhook-token')\n")
    result = deployer(argv).deploy(REPLICA, canary)
    assert result.output_tail == "token=***\n"


# --- against a simulated vLLM replica --------------------------------------------------------

DEPLOY_SCRIPT = """\
import json, os, shutil, sys, urllib.request
target = os.path.join(sys.argv[1], os.environ["ROLLOUTD_REPLICA"])
shutil.rmtree(target, ignore_errors=True)
shutil.copytree(os.environ["ROLLOUTD_ARTEFACT_ROOT"], target)
config = json.loads(os.environ["ROLLOUTD_ENGINE_CONFIG"])
body = {"config": {"max_model_len": config["max_seq_len"], "model_path": target,
                   "artefact_digest": os.environ["ROLLOUTD_ARTEFACT_DIGEST"]}}
request = urllib.request.Request(
    os.environ["ROLLOUTD_REPLICA_URL"] + "/admin/restart", data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
print(urllib.request.urlopen(request).status)
"""


@pytest.fixture
def vllm() -> Iterator[SimReplica]:
    """A simulated vLLM replica that restarts in about 20 ms."""
    with SimReplica("c1", pool="canary", flavor="vllm", time_scale=1e-4, restart_delay_s=200) as r:
        yield r


def test_deploy_then_verify_health_and_the_files_the_engine_reports(
    tmp_path: Path, vllm: SimReplica
) -> None:
    """The script copies the set and restarts vLLM; verification hashes the reported root."""
    stable = pinned(tmp_path, "build-old", STABLE_CONFIG, engine="vllm")
    canary = pinned(tmp_path, "build-new", CANARY_CONFIG, engine="vllm")
    argv = python_script(tmp_path / "deploy.py", DEPLOY_SCRIPT)
    plan = plan_for(
        {"kind": "command", "argv": [*argv, str(tmp_path / "hosts")], "poll_interval": "10ms"},
        [vllm.url],
    )
    executor = build_executor(plan)
    replica = plan.pools.canary.replicas[0]
    deployed = executor.deploy(replica, canary)
    assert deployed.ok, deployed.output_tail
    verified = executor.verify(replica, canary, timeout=5)
    assert (verified.ok, verified.healthy, verified.digest_ok) == (True, True, True)
    assert vllm.config.max_seq_len == 8192
    assert verified.detail["files_path"] == str(tmp_path / "hosts" / "c1")

    # The replica still runs the canary files: verifying them as stable fails, by file.
    wrong = executor.verify(replica, stable, timeout=5)
    assert (wrong.ok, wrong.healthy, wrong.digest_ok) == (False, True, False)
    assert "differ from build-old" in wrong.reason

    assert executor.deploy(replica, stable).ok
    assert executor.verify(replica, stable, timeout=5).ok
    assert vllm.config.max_seq_len == 32768

    # Someone edits an engine file on the host: the digest check catches it.
    (tmp_path / "hosts" / "c1" / "rank0.engine").write_bytes(b"hand-patched")
    tampered = executor.verify(replica, stable, timeout=5)
    assert not tampered.ok and "rank0.engine: sha256" in tampered.reason


def test_files_path_names_where_the_ops_host_reads_a_replicas_files(
    tmp_path: Path, vllm: SimReplica
) -> None:
    """With files_path set, that directory is hashed (not the reported root)."""
    canary = pinned(tmp_path, "build-new", CANARY_CONFIG, engine="vllm")
    executor = CommandDeployer(
        CommandExecutor.model_validate(
            {"kind": "command", "argv": ["true"], "files_path": str(tmp_path / "{set}")}
        )
    )
    replica = Replica(name="c1", url=vllm.url)
    assert executor.verify(replica, canary, timeout=2).ok
    other = pinned(tmp_path, "build-old", STABLE_CONFIG, engine="vllm")
    assert executor.verify(replica, other, timeout=2).ok  # its own tree, so it matches
    (tmp_path / "build-old" / "config.json").unlink()
    assert not executor.verify(replica, other, timeout=2).ok


def test_a_replica_that_stays_unhealthy_fails_verification_at_the_deadline(
    tmp_path: Path,
) -> None:
    """A dead engine (503) is reported as unhealthy once the deadline passes, not before."""
    canary = pinned(tmp_path, "build-new", CANARY_CONFIG, engine="vllm")
    with SimReplica("c1", flavor="vllm", time_scale=1e-4, restart_delay_s=1e9) as dead:
        dead.inject_oom()
        executor = CommandDeployer(
            CommandExecutor.model_validate(
                {"kind": "command", "argv": ["true"], "poll_interval": "50ms"}
            )
        )
        url = dead.url
        started = time.monotonic()
        verified = executor.verify(Replica(name="c1", url=url), canary, timeout=0.5)
    took = time.monotonic() - started
    assert (verified.ok, verified.healthy, verified.digest_ok) == (False, False, None)
    assert verified.reason == f"not healthy: GET {url}/health answered 503"
    assert 0.5 <= took < 2.0


def test_without_a_readable_path_digests_cannot_be_checked_and_verification_fails(
    tmp_path: Path, vllm: SimReplica
) -> None:
    """A hub id as root (not a path here) is not trusted as a match."""
    canary = pinned(tmp_path, "build-new", CANARY_CONFIG, engine="vllm")
    executor = CommandDeployer(CommandExecutor.model_validate({"kind": "command", "argv": ["x"]}))
    verified = executor.verify(Replica(name="c1", url=vllm.url), canary, timeout=2)
    assert (verified.healthy, verified.digest_ok, verified.ok) == (True, False, False)
    assert verified.reason.startswith(
        "cannot check digests: the engine reports its model as 'atlas-70b', not a path"
    )
