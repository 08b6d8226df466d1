"""Capacity from a vLLM server YAML: the second reference deployment's numbers and refusals.

The seed: Llama 3.1 70B Q4_K_M GGUF (38 GB) on one 48 GB L40S, max-model-len 8192, fp8 KV,
max-num-seqs 8, max-num-batched-tokens 32768; 0.92 ran, 0.95 died of OOM at graph capture.
Tolerance: the KV pool within 1% of the hand arithmetic below (the only rounding is to whole
bytes and 16-token blocks), resident sequences exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutd.core.capacity import GB, GiB
from rolloutd.core.vllm_capacity import (
    VllmConfigError,
    assess,
    parse_server,
)

ROOT = Path(__file__).resolve().parents[2]
SEED_YAML = ROOT / "config/vllm/llama-3.1-70b-q4km-l40s.yaml"
LLAMA_CONFIG = ROOT / "config/models/llama-3.1-70b-instruct-config.json"


def seed(**changes: Any) -> dict[str, Any]:
    """The seed's server YAML as a mapping, with ``changes`` (underscored keys) applied."""
    data: dict[str, Any] = yaml.safe_load(SEED_YAML.read_text())
    data.update({key.replace("_", "-"): value for key, value in changes.items()})
    return data


def model() -> dict[str, Any]:
    """Llama 3.1 70B Instruct's config.json."""
    config: dict[str, Any] = json.loads(LLAMA_CONFIG.read_text())
    return config


def assessed(data: dict[str, Any]) -> Any:
    """The seed box (38 GB of weights, a 48 GB card) under the server config ``data``."""
    server = parse_server(data, model())
    return assess(server, model(), weight_bytes=38 * GB, gpu_memory_bytes=48 * GB)


def test_the_seed_config_reproduces_its_kv_pool_and_starts() -> None:
    """0.92 of 48 GB less 38 GB weights, 0.5 GiB non-torch and the 32,768-token activation
    peak leaves ~1.87 GB of fp8 KV: one full 8,192 sequence, so vLLM starts, no OOM warning."""
    result = assessed(seed())
    activation = 32768 * 2 * 28672 * 2
    expected_pool = 0.92 * 48 * GB - 38 * GB - GiB / 2 - activation
    assert result.report.kv_pool_bytes == pytest.approx(expected_pool, rel=0.01)
    assert result.report.kv_bytes_per_token == 2 * 80 * 8 * 128 * 1
    assert result.report.resident_sequences == 1
    assert result.concurrent_at_max_len == 1
    assert result.headroom_bytes == pytest.approx(0.08 * 48 * GB, abs=1)
    keys = [key for key, _ in result.warnings]
    assert "gpu-memory-utilization" not in keys
    assert "max-num-seqs" in keys  # 8 may run, 1 fits at full length: preemption ahead


def test_095_on_the_seed_box_warns_of_an_oom_at_graph_capture() -> None:
    """2.4 GB left outside the budget is less than CUDA graphs need: the warning names the
    key and the highest utilisation that keeps the reserve."""
    result = assessed(seed(gpu_memory_utilization=0.95))
    messages = dict(result.warnings)
    assert "gpu-memory-utilization" in messages
    assert "OOM once graphs are captured" in messages["gpu-memory-utilization"]
    assert "at most 0.93" in messages["gpu-memory-utilization"]


def test_enforce_eager_needs_no_graph_headroom() -> None:
    """Without CUDA graphs, 0.95 leaves enough outside the budget."""
    result = assessed(seed(gpu_memory_utilization=0.95, enforce_eager=True))
    assert "gpu-memory-utilization" not in dict(result.warnings)


def test_fp16_kv_halves_what_fits_and_underscores_read_like_dashes() -> None:
    """kv-cache-dtype auto on a bf16 model stores 2 bytes a value; max_model_len spelt with
    underscores is the same flag."""
    fp8 = assessed(seed())
    data = seed()
    del data["kv-cache-dtype"], data["max-model-len"]
    data["max_model_len"] = 8192
    auto = assessed(data)
    assert auto.report.kv_bytes_per_token == 2 * fp8.report.kv_bytes_per_token
    assert auto.report.kv_pool_tokens == pytest.approx(fp8.report.kv_pool_tokens / 2, abs=1)


def test_fewer_batched_tokens_free_activation_memory_for_kv() -> None:
    """Halving max-num-batched-tokens halves the activation peak; the KV pool gains it."""
    full, half = assessed(seed()), assessed(seed(max_num_batched_tokens=16384))
    assert half.activation_peak_bytes * 2 == full.activation_peak_bytes
    gained = half.report.kv_pool_bytes - full.report.kv_pool_bytes
    assert gained == full.activation_peak_bytes // 2


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        ({"max-num-seqz": 8}, "max-num-seqz", "did you mean 'max-num-seqs'"),
        ({"gpu-memory-utilization": 1.5}, "gpu-memory-utilization", "at most 1"),
        ({"gpu-memory-utilization": "high"}, "gpu-memory-utilization", "must be a number"),
        ({"max-model-len": 0}, "max-model-len", "integer from 1"),
        ({"max-model-len": True}, "max-model-len", "integer from 1"),
        ({"kv-cache-dtype": "fp4"}, "kv-cache-dtype", "must be one of"),
        ({"enable-prefix-caching": "yes"}, "enable-prefix-caching", "true or false"),
        ({"max-num-batched-tokens": 4096}, "max-num-batched-tokens", "below max-model-len"),
        ({"max_num_seqs": 4}, "max_num_seqs", "given twice"),
    ],
)
def test_bad_keys_and_values_are_refused_naming_the_key(
    changes: dict[str, Any], key: str, message: str
) -> None:
    """Each refusal names the key as the file spells it and says what was expected."""
    with pytest.raises(VllmConfigError, match=message) as refused:
        parse_server(seed() | changes, model())
    assert refused.value.key == key


def test_a_budget_that_cannot_hold_the_weights_is_refused() -> None:
    """0.8 of 48 GB cannot hold 38 GB of weights and the activation peak: vLLM cannot start."""
    with pytest.raises(VllmConfigError, match="vLLM cannot start") as refused:
        assessed(seed(gpu_memory_utilization=0.8))
    assert refused.value.key == "gpu-memory-utilization"


def test_max_model_len_defaults_to_the_models_context() -> None:
    """Without max-model-len, vLLM takes max_position_embeddings (131,072 for Llama 3.1)."""
    data = seed(max_num_batched_tokens=131072)
    del data["max-model-len"]
    assert parse_server(data, model()).max_model_len == 131072
