"""The Triton model repository API of a simulated replica, over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rolloutd.sim.cases import generate_cases
from rolloutd.sim.engine import Replica

from .helpers import CLIENT, chat, sample, scrape

MODEL = "atlas-70b"


@pytest.fixture
def replica() -> Iterator[Replica]:
    """A Triton replica of the reference stable build (max_seq_len 32,768)."""
    with Replica("gpu-d", pool="canary", time_scale=1e-4) as started:
        yield started


def load(replica: Replica, config: object, name: str = MODEL) -> tuple[int, object]:
    """POST a load with ``config`` as the override (serialised unless it is a str)."""
    text = config if isinstance(config, str) else json.dumps(config)
    response = CLIENT.post(
        f"{replica.url}/v2/repository/models/{name}/load",
        json={"parameters": {"config": text}},
    )
    return response.status_code, response.json() if response.content else None


def index(replica: Replica, **body: object) -> list[dict[str, str]]:
    """POST /v2/repository/index."""
    response = CLIENT.post(f"{replica.url}/v2/repository/index", json=body)
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def test_index_lists_versions_with_state_and_reason(replica: Replica) -> None:
    """The served version is READY; the others are UNAVAILABLE, unloaded."""
    entries = index(replica)
    assert entries[0] == {"name": MODEL, "version": "1", "state": "READY", "reason": ""}
    assert [e["state"] for e in entries[1:]] == ["UNAVAILABLE", "UNAVAILABLE"]
    assert index(replica, ready=True) == [entries[0]]


def test_load_with_override_changes_capacity_and_version(replica: Replica) -> None:
    """Loading max_seq_len 8,192 pinned to version 3 gives 36 slots; the digest is reported."""
    assert replica.config.capacity().resident_sequences == 9
    status, _ = load(
        replica,
        {
            "max_seq_len": 8192,
            "version_policy": {"specific": {"versions": [3]}},
            "parameters": {"artefact_digest": {"string_value": "sha256:5f1d"}},
        },
    )
    assert status == 200
    assert [e["state"] for e in index(replica)] == ["UNAVAILABLE", "UNAVAILABLE", "READY"]
    models = f"{replica.url}/v2/models/{MODEL}"
    assert CLIENT.get(f"{models}/versions/3/ready").status_code == 200
    assert CLIENT.get(f"{models}/versions/1/ready").status_code == 400
    config = CLIENT.get(f"{models}/config").json()
    assert config["max_seq_len"] == 8192
    assert config["parameters"]["artefact_digest"] == {"string_value": "sha256:5f1d"}
    assert config["max_batch_size"] == 36
    assert replica.describe()["config"]["artefact_digest"] == "sha256:5f1d"
    assert chat(replica.url, generate_cases(1)[0]).status_code == 200
    text = scrape(replica.url)
    assert sample(text, "nv_trt_llm_request_metrics", request_type="max", version="3") == 36
    assert CLIENT.get(f"{replica.url}/v1/models").json()["data"][0]["max_model_len"] == 8192


def test_triton_parameter_form_and_queue_policy_are_honoured(replica: Replica) -> None:
    """max_seq_len as a string parameter and the queue policy timeout both apply."""
    status, _ = load(
        replica,
        {
            "parameters": {"max_seq_len": {"string_value": "8192"}},
            "dynamic_batching": {"default_queue_policy": {"default_timeout_microseconds": 5000000}},
        },
    )
    assert status == 200
    assert replica.config.max_seq_len == 8192
    assert replica.config.queue_timeout_s == 5.0


def test_unload_takes_the_model_out_of_service(replica: Replica) -> None:
    """After unload, requests fail with 400, the version is not ready, the server still is."""
    assert (
        CLIENT.post(
            f"{replica.url}/v2/repository/models/{MODEL}/unload",
            json={"parameters": {"unload_dependents": True}},
        ).status_code
        == 200
    )
    assert index(replica)[0]["state"] == "UNAVAILABLE"
    assert index(replica)[0]["reason"] == "unloaded"
    assert CLIENT.get(f"{replica.url}/v2/models/{MODEL}/versions/1/ready").status_code == 400
    assert CLIENT.get(f"{replica.url}/v2/health/ready").status_code == 200
    assert chat(replica.url, generate_cases(1)[0]).status_code == 400
    assert load(replica, {"max_seq_len": 8192})[0] == 200
    assert chat(replica.url, generate_cases(1)[0]).status_code == 200


@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        (MODEL, "{not json", "failed to parse"),
        ("other-model", {}, "failed to poll from model repository"),
        (MODEL, {"version_policy": {"specific": {"versions": [7]}}}, "version 7"),
        (MODEL, {"max_seq_len": "long"}, "max_seq_len"),
        (MODEL, [1, 2], "JSON object"),
    ],
)
def test_bad_loads_are_400_with_an_error(
    replica: Replica, name: str, config: object, message: str
) -> None:
    """Bad overrides and unknown models answer 400 {"error": ...} and change nothing."""
    status, body = load(replica, config, name)
    assert status == 400
    assert isinstance(body, dict) and message in body["error"]
    assert replica.config.max_seq_len == 32768
    assert index(replica, ready=True)[0]["version"] == "1"


def test_a_config_that_does_not_fit_leaves_the_model_unavailable(replica: Replica) -> None:
    """A memory fraction too small for the weights is a CUDA OOM at load time."""
    config = {"parameters": {"kv_cache_free_gpu_mem_fraction": {"string_value": "0.3"}}}
    status, body = load(replica, config)
    assert status == 400 and isinstance(body, dict) and "out of memory" in body["error"]
    assert index(replica)[0]["state"] == "UNAVAILABLE"
    assert CLIENT.get(f"{replica.url}/v2/health/ready").status_code == 400


def test_bad_json_bodies_and_vllm_routes() -> None:
    """A body that is not JSON is a 400; a vLLM replica has no repository API."""
    with Replica("v", flavor="vllm", time_scale=1e-4) as vllm:
        response = CLIENT.post(
            f"{vllm.url}/v1/chat/completions",
            content=b"{oops",
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 400 and "error" in response.json()
        assert CLIENT.post(f"{vllm.url}/v2/repository/index", json={}).status_code == 404
        assert CLIENT.get(f"{vllm.url}/health").status_code == 200
