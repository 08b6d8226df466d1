"""``rolloutctl capacity --vllm-config``: the seed's YAML in, figures and warnings out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import Ctl
from tests.core.test_vllm_capacity import LLAMA_CONFIG, SEED_YAML


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Ctl:
    """rolloutctl for a command that never opens the database."""
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


def args(server: Path | str = SEED_YAML, *more: str) -> list[str]:
    """The capacity command for ``server`` on the seed's model and box."""
    return [
        "capacity", "--vllm-config", str(server), "--model-config", str(LLAMA_CONFIG),
        "--weights-gb", "38", "--gpu-memory-gb", "48", *more,
    ]  # fmt: skip


def test_the_seed_yaml_gives_its_figures_as_json(ctl: Ctl) -> None:
    """JSON carries the server's settings, the KV pool and no OOM warning at 0.92."""
    data = ctl.json(*args())
    assert data["server"]["max_model_len"] == 8192
    assert data["server"]["kv_dtype_bytes"] == 1
    assert data["server"]["enable_prefix_caching"] is True
    assert data["resident_sequences"] == 1
    assert data["kv_pool_tokens"] == pytest.approx(11_383, rel=0.01)
    assert [w["key"] for w in data["warnings"]] == ["max-num-seqs"]


def test_095_warns_in_text_and_json(ctl: Ctl, tmp_path: Path) -> None:
    """The same YAML at 0.95 prints a warning naming the file and the key; exit stays 0."""
    server = tmp_path / "vllm.yaml"
    server.write_text(SEED_YAML.read_text().replace("0.92", "0.95"))
    code, out, err = ctl(*args(server))
    assert code == 0, err
    assert f"{server}: warning: gpu-memory-utilization: 0.95 leaves 2.40 GB" in out
    data = ctl.json(*args(server))
    assert "gpu-memory-utilization" in [w["key"] for w in data["warnings"]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max-model-len: [8192\n", ": is not valid YAML (a vLLM server config)"),
        ("- max-model-len\n", ": expected a mapping of vLLM flags"),
        ("max-model-len: 8192\nmax-num-seqz: 8\n", ": max-num-seqz: not a vLLM server flag"),
        ("max_model_len: eight\n", ": max_model_len: must be an integer"),
        ("max-model-len: 8192\ngpu-memory-utilization: 0.5\n", "gpu-memory-utilization: "),
    ],
)
def test_bad_yaml_exits_2_naming_the_file_and_key(
    ctl: Ctl, tmp_path: Path, text: str, expected: str
) -> None:
    """Syntax errors, a list, an unknown flag, a bad value, a budget too small: exit 2."""
    server = tmp_path / "vllm.yaml"
    server.write_text(text)
    code, out, err = ctl(*args(server))
    assert code == 2
    assert out == ""
    assert err.startswith(f"rolloutctl: {server}")
    assert expected in err


def test_flags_the_yaml_decides_and_missing_inputs_are_refused(ctl: Ctl) -> None:
    """--tp beside --vllm-config is two truths; the weights' size must be given."""
    code, _, err = ctl(*args(SEED_YAML, "--tp", "2"))
    assert code == 2 and "--tp: comes from" in err
    code, _, err = ctl("capacity", "--vllm-config", str(SEED_YAML), "--model-config",
                       str(LLAMA_CONFIG))  # fmt: skip
    assert code == 2 and "--weights-gb" in err
    code, _, err = ctl("capacity", "--vllm-config", "/nonexistent.yaml", "--model-config",
                       str(LLAMA_CONFIG), "--weights-gb", "38")  # fmt: skip
    assert code == 2 and "/nonexistent.yaml: no such file" in err


def test_a_measured_graph_size_replaces_the_default_reserve(ctl: Ctl) -> None:
    """An engine whose log says its graphs take 1.5 GiB fits 0.92 with room; 4 GB does not.
    Without --vllm-config the option means nothing and is refused."""
    small = ctl.json(*args(SEED_YAML, "--cuda-graph-gb", "1.6"))
    assert small["headroom_needed_bytes_per_gpu"] == 1_600_000_000
    assert "gpu-memory-utilization" not in [w["key"] for w in small["warnings"]]
    large = ctl.json(*args(SEED_YAML, "--cuda-graph-gb", "4"))
    assert "gpu-memory-utilization" in [w["key"] for w in large["warnings"]]
    code, _, err = ctl("capacity", "--cuda-graph-gb", "4")
    assert code == 2 and "--cuda-graph-gb: only means something with --vllm-config" in err
