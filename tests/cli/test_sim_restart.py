"""``rolloutctl sim restart``: the systemd executor's restart on a simulated vLLM box restarts
it on the environment file's model, and refuses bad input with one message, no traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rolloutd.sim.engine import Replica
from tests.cli import Ctl


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Ctl:
    """rolloutctl for a command that never opens the database."""
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


@pytest.fixture
def box() -> Iterator[Replica]:
    """A simulated vLLM replica that comes back from a restart in 20 ms."""
    with Replica("box-b", flavor="vllm", time_scale=1e-3, restart_delay_s=20) as replica:
        yield replica


def env_file(tmp_path: Path, model: Path | str, args: str) -> Path:
    """An environment file as the systemd executor writes it."""
    path = tmp_path / "box-b.env"
    path.write_text(
        "# Written by rolloutd: artefact set llama-gguf. Do not edit.\n"
        'ROLLOUTD_ARTEFACT_SET="llama-gguf"\n'
        'ROLLOUTD_ARTEFACT_DIGEST="sha256:abc"\n'
        f'VLLM_MODEL="{model}"\n'
        f'VLLM_ARGS="{args}"\n'
    )
    return path


def test_restart_serves_the_env_files_model_under_its_served_name(
    ctl: Ctl, box: Replica, tmp_path: Path
) -> None:
    """The box restarts (its /health fails, then answers) on the file's max-model-len, and
    /v1/models names --served-model-name with the model path as its root."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    args = "--kv-cache-dtype fp8 --max-model-len 4096 --served-model-name llama-70b"
    code, out, err = ctl(
        "sim", "restart", "--url", box.url, "--env-file", str(env_file(tmp_path, gguf, args))
    )
    assert code == 0, err
    assert f"restarting on {gguf} (served as llama-70b)" in out
    assert box.wait_ready(5.0)
    [card] = httpx.get(f"{box.url}/v1/models", timeout=5).json()["data"]
    assert (card["id"], card["root"], card["max_model_len"]) == ("llama-70b", str(gguf), 4096)
    assert box.restarts == 1 and box.ooms == 0


def test_without_a_served_name_the_model_is_named_by_its_path(
    ctl: Ctl, box: Replica, tmp_path: Path
) -> None:
    """As vLLM does, a model started without --served-model-name is listed by its path."""
    model = tmp_path / "awq"
    model.mkdir()
    code, _, err = ctl(
        "sim", "restart", "--url", box.url, "--env-file", str(env_file(tmp_path, model, ""))
    )
    assert code == 0, err
    assert box.wait_ready(5.0)
    assert httpx.get(f"{box.url}/v1/models", timeout=5).json()["data"][0]["id"] == str(model)


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://127.0.0.1:1", "http://", "http://h:0"])
def test_a_bad_url_exits_2_naming_url(ctl: Ctl, tmp_path: Path, url: str) -> None:
    """A URL that is not http(s)://HOST:PORT is bad input, before the file is read."""
    code, out, err = ctl("sim", "restart", "--url", url, "--env-file", str(tmp_path / "x.env"))
    assert code == 2 and not out
    assert err.strip() == f"rolloutctl: --url: expected the replica's http://HOST:PORT, got {url!r}"


def test_a_missing_env_file_exits_2_naming_it(ctl: Ctl, tmp_path: Path) -> None:
    """No environment file: one line naming --env-file and the path."""
    missing = tmp_path / "vllm" / "box-b.env"
    code, _, err = ctl("sim", "restart", "--url", "http://127.0.0.1:1", "--env-file", str(missing))
    assert code == 2
    assert err.strip() == f"rolloutctl: --env-file: {missing} does not exist"


@pytest.mark.parametrize(
    ("model", "args", "field", "message"),
    [
        ("", "", "VLLM_MODEL", "missing"),
        ("/nonexistent/model.gguf", "", "VLLM_MODEL", "vLLM would not start on it"),
        ("MODEL", "fp8 --max-model-len 8192", "VLLM_ARGS", "'fp8' is not a --flag"),
        ("MODEL", "--max-model-len", "VLLM_ARGS", "--max-model-len needs a value"),
    ],
)
def test_an_env_file_vllm_would_refuse_exits_2_naming_its_field(
    ctl: Ctl, tmp_path: Path, model: str, args: str, field: str, message: str
) -> None:
    """A model that is not there or arguments that are not flags: the file and the field."""
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    model = model.replace("MODEL", str(tmp_path / "model.gguf"))
    path = env_file(tmp_path, model, args)
    code, _, err = ctl("sim", "restart", "--url", "http://127.0.0.1:1", "--env-file", str(path))
    assert code == 2
    assert err.startswith(f"rolloutctl: {path}: {field}: ") and message in err


def test_an_unreachable_or_triton_replica_exits_1_saying_so(ctl: Ctl, tmp_path: Path) -> None:
    """Nothing listening, or a simulated Triton replica: a runtime failure, one line."""
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    path = str(env_file(tmp_path, tmp_path / "model.gguf", ""))
    code, _, err = ctl("sim", "restart", "--url", "http://127.0.0.1:1", "--env-file", path)
    assert code == 1 and "cannot reach http://127.0.0.1:1" in err
    with Replica("gpu-d", flavor="triton", time_scale=1e-3) as triton:
        code, _, err = ctl("sim", "restart", "--url", triton.url, "--env-file", path)
        assert code == 1 and "is a simulated triton replica, not vLLM" in err
        assert triton.restarts == 0
