"""Faults show in /metrics and health the way vLLM and Triton show them."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

from rolloutd.sim.cases import generate_cases
from rolloutd.sim.config import REFERENCE_CANARY, REFERENCE_STABLE
from rolloutd.sim.engine import Replica

from .helpers import CLIENT, chat, sample, scrape

CASES = generate_cases(40, seed=3)


def wait_for(condition: object, timeout: float = 5.0) -> None:
    """Poll a zero-argument callable until it is true."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_metric_names_and_types_are_the_engines_own() -> None:
    """Triton counters carry no _total suffix; vLLM's do; both export process start time."""
    with (
        Replica("t", flavor="triton", time_scale=1e-5) as triton,
        Replica("v", flavor="vllm", time_scale=1e-5) as vllm,
    ):
        for replica in (triton, vllm):
            assert chat(replica.url, CASES[0]).status_code == 200
        t, v = scrape(triton.url), scrape(vllm.url)
    for line in (
        "# TYPE nv_inference_request_success counter",
        "# TYPE nv_inference_request_failure counter",
        "# TYPE nv_inference_count counter",
        "# TYPE nv_inference_request_duration_us counter",
        "# TYPE nv_inference_queue_duration_us counter",
        "# TYPE nv_inference_pending_request_count gauge",
        "# TYPE nv_trt_llm_kv_cache_block_metrics gauge",
        "# TYPE nv_trt_llm_request_metrics gauge",
        "# TYPE nv_llm_input_token_len histogram",
        "# TYPE nv_llm_output_token_len histogram",
        "# TYPE nv_inference_first_response_histogram_ms histogram",
        "# TYPE process_start_time_seconds gauge",
        "# TYPE rolloutd_sim_restarts_total counter",
    ):
        assert line in t
    assert sample(t, "nv_inference_request_success", model="atlas-70b", version="1") == 1
    assert sample(t, "nv_trt_llm_request_metrics", request_type="max") == 9
    blocks = sample(t, "nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max")
    assert blocks == REFERENCE_STABLE.capacity().kv_pool_tokens // 64
    for name in (
        "vllm:e2e_request_latency_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):
        assert f"# TYPE {name} histogram" in v
    for name in ("vllm:request_success_total", "vllm:num_preemptions_total"):
        assert f"# TYPE {name} counter" in v
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert f"# TYPE {name} gauge" in v
    assert (
        sample(v, "vllm:request_success_total", finished_reason="stop", model_name="atlas-70b") == 1
    )
    assert sample(v, "vllm:request_prompt_tokens_count", model_name="atlas-70b") == 1


def test_requests_beyond_resident_sequences_queue_and_time_out_as_rejected() -> None:
    """30 concurrent requests on 9 slots: 9 run, the rest wait out the queue timeout."""
    config = dataclasses.replace(REFERENCE_STABLE, queue_timeout_s=10.0)
    with Replica("t", config=config, time_scale=0.1) as replica:
        # Slow enough (>= 34 s each, 3.4 s of wall time) that no slot frees up before every
        # waiter gave up, even when the last of the 30 requests reaches the engine 2 s after
        # the first (at 14 s, a busy CI host once let a late waiter have a freed slot).
        replica.set_faults(latency_factor=6.0)
        with ThreadPoolExecutor(30) as pool:
            futures = [
                pool.submit(chat, replica.url, case, session=f"s{i}")
                for i, case in enumerate(CASES[:30])
            ]
            wait_for(lambda: replica.process is not None and replica.process.slots.waiting == 21)
            text = scrape(replica.url)
            statuses = sorted(future.result().status_code for future in futures)
        after = scrape(replica.url)
    assert sample(text, "nv_trt_llm_request_metrics", request_type="scheduled") == 9
    assert sample(text, "nv_inference_pending_request_count") == 21
    assert sample(text, "nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction") > 0
    assert statuses == [200] * 9 + [503] * 21
    assert sample(after, "nv_inference_request_failure", reason="REJECTED") == 21
    assert sample(after, "nv_inference_request_success") == 9


def test_timeout_fault_shows_as_rejected_on_triton_and_abort_on_vllm() -> None:
    """The timeout fault rejects requests: REJECTED on Triton, finished_reason=abort on vLLM."""
    with (
        Replica("t", flavor="triton", time_scale=1e-4) as triton,
        Replica("v", flavor="vllm", time_scale=1e-4) as vllm,
    ):
        for replica in (triton, vllm):
            CLIENT.post(f"{replica.url}/admin/faults", json={"timeout_rate": 1.0})
            responses = [chat(replica.url, case) for case in CASES[:5]]
            assert [r.status_code for r in responses] == [503] * 5
            assert "timeout" in responses[0].json()["error"]["message"]
        t, v = scrape(triton.url), scrape(vllm.url)
    assert sample(t, "nv_inference_request_failure", reason="REJECTED") == 5
    assert sample(t, "nv_inference_request_success") == 0
    assert sample(v, "vllm:request_success_total", finished_reason="abort") == 5


def test_oom_fails_health_then_restarts_with_a_new_start_time_on_triton() -> None:
    """OOM on Triton: ready 400, model UNAVAILABLE; then a restart, counters at zero."""
    with Replica("t", time_scale=0.001, restart_delay_s=300) as replica:
        assert chat(replica.url, CASES[0]).status_code == 200
        before = scrape(replica.url)
        CLIENT.post(f"{replica.url}/admin/faults", json={"oom": True})
        assert CLIENT.get(f"{replica.url}/v2/health/ready").status_code == 400
        index = CLIENT.post(f"{replica.url}/v2/repository/index", json={}).json()
        served = next(entry for entry in index if entry["version"] == "1")
        assert served["state"] == "UNAVAILABLE" and "out of memory" in served["reason"]
        assert chat(replica.url, CASES[1]).status_code == 503
        wait_for(lambda: CLIENT.get(f"{replica.url}/v2/health/ready").status_code == 200)
        after = scrape(replica.url)
    assert sample(before, "rolloutd_sim_restarts_total", replica="t") == 0
    assert sample(after, "rolloutd_sim_restarts_total", replica="t") == 1
    assert sample(after, "process_start_time_seconds") > sample(
        before, "process_start_time_seconds"
    )
    assert sample(before, "nv_inference_request_success") == 1
    assert sample(after, "nv_inference_request_success") == 0


def test_oom_on_vllm_fails_health_and_scrapes_until_restart() -> None:
    """OOM on vLLM: /health 503 and no scrape while dead, back with restarts +1."""
    with Replica("v", flavor="vllm", time_scale=0.001, restart_delay_s=300) as replica:
        start = sample(scrape(replica.url), "process_start_time_seconds")
        replica.inject_oom()
        assert CLIENT.get(f"{replica.url}/health").status_code == 503
        assert CLIENT.get(f"{replica.url}/metrics").status_code == 503
        wait_for(lambda: CLIENT.get(f"{replica.url}/health").status_code == 200)
        text = scrape(replica.url)
    assert sample(text, "rolloutd_sim_restarts_total") == 1
    assert sample(text, "process_start_time_seconds") > start


def test_prompt_longer_than_a_contiguous_reservation_is_an_oom() -> None:
    """Non-paged KV cache: a sequence past max_seq_len crashes the engine; paged rejects it."""
    contiguous = dataclasses.replace(REFERENCE_CANARY, paged_kv_cache=False)
    with Replica("c", config=contiguous, time_scale=1e-4, restart_delay_s=10) as replica:
        assert chat(replica.url, CASES[0], prompt_tokens=8100).status_code == 500
        assert replica.ooms == 1
        wait_for(lambda: replica.restarts == 1)
    with Replica("p", config=REFERENCE_CANARY, time_scale=1e-4) as replica:
        response = chat(replica.url, CASES[0], prompt_tokens=9000)
        assert response.status_code == 400
        assert "maximum context length is 8192" in response.json()["error"]["message"]
        assert sample(scrape(replica.url), "nv_inference_request_failure", reason="BACKEND") == 1
        assert replica.ooms == 0


def test_latency_factor_shows_in_the_latency_histograms() -> None:
    """Latency factor 3 triples the mean e2e latency in vllm:e2e_request_latency_seconds."""
    with Replica("v", flavor="vllm", time_scale=1e-4) as replica:

        def mean_latency(cases: list) -> float:  # type: ignore[type-arg]
            before = scrape(replica.url)
            for case in cases:
                assert chat(replica.url, case).status_code == 200
            after = scrape(replica.url)
            total = sample(after, "vllm:e2e_request_latency_seconds_sum") - sample(
                before, "vllm:e2e_request_latency_seconds_sum"
            )
            return total / len(cases)

        normal = mean_latency(CASES[:10])
        replica.set_faults(latency_factor=3.0)
        slow = mean_latency(CASES[:10])
    assert 5.0 < normal < 12.0
    assert slow / normal > 2.5


def test_a_request_admitted_at_once_queues_for_no_time() -> None:
    """With free slots a request is admitted without waiting: its queue time is 0 however
    the host schedules the threads, where at 1 ms real = 10 s simulated the wall time around
    an uncontended admission read as queueing (and a busy CI host as a slow canary)."""
    with Replica("v", flavor="vllm", time_scale=1e-4) as replica:
        for case in CASES[:5]:
            assert chat(replica.url, case).status_code == 200
        text = scrape(replica.url)
    assert sample(text, "vllm:request_queue_time_seconds_count") == 5
    assert sample(text, "vllm:request_queue_time_seconds_sum") == 0
