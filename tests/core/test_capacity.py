"""The KV-cache arithmetic against the reference deployment's numbers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rolloutd.core.capacity import (
    REFERENCE_DEPLOYMENT,
    CapacityError,
    ModelShape,
    kv_bytes_per_token,
    max_seq_len_for,
    plan,
    resident_sequences,
)

LLAMA_70B_CONFIG = {
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
}


def test_hf_config_gives_the_reference_shape() -> None:
    """A Llama-70B config.json reads as 80 layers, 8 KV heads and head_dim 128."""
    shape = ModelShape.from_hf_config(LLAMA_70B_CONFIG)
    assert shape == REFERENCE_DEPLOYMENT.shape
    assert kv_bytes_per_token(shape, kv_dtype_bytes=2) == 327_680


def test_explicit_head_dim_wins_and_missing_keys_are_named() -> None:
    """An explicit head_dim is used as given; a missing key is named in the error."""
    shape = ModelShape.from_hf_config({**LLAMA_70B_CONFIG, "head_dim": 96})
    assert shape.head_dim == 96
    with pytest.raises(CapacityError, match="num_hidden_layers"):
        ModelShape.from_hf_config({"num_attention_heads": 8, "hidden_size": 1024})


def test_resident_sequences_at_32768_are_about_nine() -> None:
    """70B FP8 on 4x48 GB holds 9-12 sequences of 32,768 tokens (reference: ~9)."""
    assert 9 <= resident_sequences(REFERENCE_DEPLOYMENT, 32_768) <= 12


def test_resident_sequences_at_8192_are_about_four_times_more() -> None:
    """At 8,192 tokens the same box holds 35-48 sequences, four times as many."""
    at_8k = resident_sequences(REFERENCE_DEPLOYMENT, 8_192)
    assert 35 <= at_8k <= 48
    ratio = at_8k / resident_sequences(REFERENCE_DEPLOYMENT, 32_768)
    assert ratio == pytest.approx(4.0, rel=0.15)


def test_max_seq_len_for_60_concurrent_fits_and_is_the_longest() -> None:
    """The max_seq_len for 60 concurrent sequences holds 60, one block more does not."""
    length = max_seq_len_for(REFERENCE_DEPLOYMENT, 60)
    block = REFERENCE_DEPLOYMENT.tokens_per_block
    assert length % block == 0
    assert resident_sequences(REFERENCE_DEPLOYMENT, length) >= 60
    assert resident_sequences(REFERENCE_DEPLOYMENT, length + block) < 60
    assert 4_000 < length < 8_192, "one replica cannot give 60 users 8,192 tokens each"


def test_fp8_kv_cache_doubles_capacity_and_data_parallel_adds_instances() -> None:
    """Halving KV bytes doubles the sequences; TP 2 on 4 GPUs runs two instances."""
    fp8 = dataclasses.replace(REFERENCE_DEPLOYMENT, kv_dtype_bytes=1)
    assert resident_sequences(fp8, 32_768) >= 2 * resident_sequences(REFERENCE_DEPLOYMENT, 32_768)
    small = dataclasses.replace(REFERENCE_DEPLOYMENT, weight_bytes=16 * 10**9, tensor_parallel=2)
    assert plan(small, 8_192).instances == 2


def test_weights_that_do_not_fit_are_refused() -> None:
    """Weights beyond the memory budget raise CapacityError, not a negative capacity."""
    huge = dataclasses.replace(REFERENCE_DEPLOYMENT, weight_bytes=180 * 10**9)
    with pytest.raises(CapacityError, match="no room for a KV cache"):
        resident_sequences(huge, 8_192)
    with pytest.raises(CapacityError, match="tensor_parallel"):
        dataclasses.replace(REFERENCE_DEPLOYMENT, tensor_parallel=3)


def test_rolloutctl_capacity_reproduces_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    """`rolloutctl capacity` on the reference config: ~9 at 32,768, ~4x that at 8,192."""
    from rolloutd.cli.ctl import main

    config = Path(__file__).resolve().parents[2] / "config" / "models" / "atlas-70b-config.json"
    with pytest.raises(SystemExit) as done:
        main(
            ["capacity", "--model-config", str(config), "--target-concurrency", "60", "-o", "json"]
        )
    assert done.value.code == 0
    data = json.loads(capsys.readouterr().out)
    resident = {r["max_seq_len"]: r["resident_sequences"] for r in data["by_max_seq_len"]}
    assert 9 <= resident[32768] <= 12
    assert 35 <= resident[8192] <= 48
    assert 3.5 <= resident[8192] / resident[32768] <= 4.5
    assert data["max_seq_len_for_target"] < 8192


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--weights-gb", "400"], "no room for a KV cache"),
        (["--gpus", "3", "--tp", "2"], "not a multiple"),
    ],
)
def test_rolloutctl_capacity_rejects_impossible_deployments(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deployment that cannot exist exits 2 with the reason and no traceback."""
    from rolloutd.cli.ctl import main

    with pytest.raises(SystemExit) as done:
        main(["capacity", *args])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_bad_model_config_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config.json without the attention geometry is bad input naming the file and key."""
    from rolloutd.cli.ctl import main

    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096}')
    with pytest.raises(SystemExit) as done:
        main(["capacity", "--model-config", str(bad)])
    assert done.value.code == 2
    assert f"{bad}" in capsys.readouterr().err


def test_plan_validate_warns_when_the_target_concurrency_cannot_fit(tmp_path: Path) -> None:
    """A plan whose canary pool cannot hold its sessions loads, with a capacity warning."""
    from rolloutd.planfile import load_plan

    example = Path(__file__).resolve().parents[2] / "config" / "plans" / "atlas-70b-maxseq8192.yaml"
    assert load_plan(example).warnings == ()
    crowded = tmp_path / "crowded.yaml"
    crowded.write_text(example.read_text().replace("active_share: 0.6", "active_share: 1.0"))
    (warning,) = load_plan(crowded).warnings
    assert warning.field == "capacity"
    assert "need 60 resident sequences" in warning.message and "hold 36" in warning.message
