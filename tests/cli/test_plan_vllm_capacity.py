"""``plan validate`` on a plan whose capacity section names the canary's vLLM server YAML."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import Ctl
from tests.core.test_vllm_capacity import LLAMA_CONFIG, SEED_YAML
from tests.plans import small_dict


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Ctl:
    """rolloutctl for a command that never opens the database."""
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


def write_plan(tmp_path: Path, utilization: str = "0.92", **capacity: Any) -> Path:
    """A small plan beside a copy of the seed's server YAML (at ``utilization``) and the
    model's config.json, naming both by relative paths."""
    (tmp_path / "vllm").mkdir(exist_ok=True)
    text = SEED_YAML.read_text().replace("0.92", utilization)
    (tmp_path / "vllm" / "server.yaml").write_text(text)
    shutil.copy(LLAMA_CONFIG, tmp_path / "vllm" / "config.json")
    data = small_dict()
    data["capacity"] = {
        "max_seq_len": 8192,
        "target_concurrency": 1,
        "vllm": {
            "config": "vllm/server.yaml",
            "model_json": "vllm/config.json",
            "weights_gb": 38,
            "gpu_memory_gb": 48,
        },
    } | capacity
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data))
    return plan


def test_the_seed_config_validates_with_its_findings_as_warnings(ctl: Ctl, tmp_path: Path) -> None:
    """At 0.92 the plan is ok; the server's max-num-seqs finding is a warning on its file."""
    plan = write_plan(tmp_path)
    [result] = ctl.json("plan", "validate", str(plan))
    assert result["ok"] is True
    server = str(tmp_path / "vllm" / "server.yaml")
    assert [w["field"] for w in result["warnings"] if w["source"] == server] == ["max-num-seqs"]
    assert not [w for w in result["warnings"] if w["field"] == "capacity"]


def test_095_warns_of_graph_capture_oom(ctl: Ctl, tmp_path: Path) -> None:
    """At 0.95 plan validate prints the headroom warning naming the YAML and key, exit 0."""
    plan = write_plan(tmp_path, "0.95")
    code, out, err = ctl("plan", "validate", str(plan))
    assert code == 0, err
    assert f"{tmp_path}/vllm/server.yaml: warning: gpu-memory-utilization: 0.95 leaves" in out
    assert out.rstrip().endswith(f"{plan}: ok")


def test_a_target_the_canary_cannot_run_at_once_warns(ctl: Ctl, tmp_path: Path) -> None:
    """Four sequences of 8,192 at once do not fit one replica's ~11k-token pool."""
    [result] = ctl.json("plan", "validate", str(write_plan(tmp_path, target_concurrency=4)))
    assert result["ok"] is True
    assert "need 4 sequences at once, but 1 canary replica(s) run 1" in str(result["warnings"])


def test_a_broken_server_yaml_fails_the_plan_naming_the_yaml(ctl: Ctl, tmp_path: Path) -> None:
    """An unknown flag in the server YAML: exit 2, the problem names that file and key."""
    plan = write_plan(tmp_path)
    server = tmp_path / "vllm" / "server.yaml"
    server.write_text(server.read_text() + "max-num-seqz: 8\n")
    code, out, _ = ctl("plan", "validate", str(plan))
    assert code == 2
    assert f"{server}: max-num-seqz: not a vLLM server flag" in out


def test_a_max_seq_len_above_the_servers_is_a_problem(ctl: Ctl, tmp_path: Path) -> None:
    """The plan assumes 16,384 tokens; the server refuses past 8,192."""
    code, out, _ = ctl("plan", "validate", str(write_plan(tmp_path, max_seq_len=16384)))
    assert code == 2
    assert "capacity.max_seq_len: 16384 is above the server's max-model-len 8192" in out


def test_engine_and_vllm_together_are_refused(ctl: Ctl, tmp_path: Path) -> None:
    """Two shapes for one canary: the plan is refused naming the section."""
    engine = {"num_layers": 80, "num_kv_heads": 8, "head_dim": 128, "weights_gb": 38,
              "gpus": 1, "gpu_memory_gb": 48, "tensor_parallel": 1}  # fmt: skip
    code, out, _ = ctl("plan", "validate", str(write_plan(tmp_path, engine=engine)))
    assert code == 2
    assert "give 'engine' or 'vllm', not both" in out


def test_a_plan_can_state_its_engines_measured_graph_size(ctl: Ctl, tmp_path: Path) -> None:
    """cuda_graph_gb 1.5 (from the engine's log): 0.95 leaves enough, no headroom warning."""
    vllm = {"config": "vllm/server.yaml", "model_json": "vllm/config.json", "weights_gb": 38,
            "cuda_graph_gb": 1.5}  # fmt: skip
    [result] = ctl.json("plan", "validate", str(write_plan(tmp_path, "0.95", vllm=vllm)))
    assert result["ok"] is True
    assert "gpu-memory-utilization" not in [w["field"] for w in result["warnings"]]


def test_a_stored_plan_naming_vllm_files_by_relative_path_parses_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon and rolloutctl re-read a rollout's plan from the text stored with it, in
    their own working directory: the vLLM files the plan names beside itself were checked
    at start and are not looked for again (every tick and an abort failed on them)."""
    from types import SimpleNamespace
    from typing import cast

    from rolloutd.operations import plan_of
    from rolloutd.planfile import load_plan

    loaded = load_plan(write_plan(tmp_path))
    monkeypatch.chdir(tmp_path / "vllm")  # where "vllm/server.yaml" names nothing
    stored = SimpleNamespace(id=7, plan_hash="relative-vllm-files", plan_source=loaded.text)
    plan = plan_of(cast(Any, stored))
    assert plan.capacity is not None and plan.capacity.vllm is not None
    assert plan == loaded.plan
