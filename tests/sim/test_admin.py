"""Fault injection over the admin endpoint, restarts with new engine args, fleet and gateway."""

from __future__ import annotations

import time

import pytest

from rolloutd.sim.engine import Replica
from rolloutd.sim.exposition import Flavor
from rolloutd.sim.fleet import Fleet, ReplicaSpec
from rolloutd.sim.traffic import PoolTally, TrafficGenerator, TrafficReport

from .helpers import CLIENT, sample


def test_admin_endpoint_sets_reads_and_clears_faults() -> None:
    """POST changes the named faults, GET shows them, DELETE restores a healthy engine."""
    with Replica("a", time_scale=1e-4) as replica:
        url = f"{replica.url}/admin/faults"
        assert CLIENT.get(url).json()["latency_factor"] == 1.0
        changed = CLIENT.post(url, json={"latency_factor": 2.5, "escalation_rate": 0.2})
        assert changed.status_code == 200
        assert replica.faults.latency_factor == 2.5 and replica.faults.escalation_rate == 0.2
        assert CLIENT.get(url).json()["escalation_rate"] == 0.2
        assert CLIENT.delete(url).json()["latency_factor"] == 1.0
        assert replica.faults.escalation_rate == 0.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"latency_factr": 2}, "unknown fault 'latency_factr'"),
        ({"timeout_rate": 1.5}, "timeout_rate: expected a share between 0 and 1"),
        ({"latency_factor": "fast"}, "latency_factor: expected a number"),
        ([1], "expected a JSON object"),
    ],
)
def test_admin_endpoint_refuses_bad_faults(body: object, message: str) -> None:
    """Unknown faults and bad values are 400 with a message naming them; nothing changes."""
    with Replica("a", time_scale=1e-4) as replica:
        response = CLIENT.post(f"{replica.url}/admin/faults", json=body)
        assert response.status_code == 400
        assert message in response.json()["error"]
        assert replica.faults.timeout_rate == 0.0 and replica.faults.latency_factor == 1.0


def test_vllm_restart_with_new_engine_args_changes_max_model_len() -> None:
    """A deploy restart comes back with the new max_model_len; it is not counted as an OOM."""
    with Replica("v", flavor="vllm", time_scale=1e-3, restart_delay_s=20) as replica:
        response = CLIENT.post(
            f"{replica.url}/admin/restart", json={"config": {"max_model_len": 8192}}
        )
        assert response.status_code == 200
        assert replica.wait_ready(5.0)
        card = CLIENT.get(f"{replica.url}/v1/models").json()["data"][0]
        assert card["max_model_len"] == 8192
        assert replica.restarts == 1 and replica.ooms == 0
        bad = CLIENT.post(f"{replica.url}/admin/restart", json={"config": {"max_len": 1}})
        assert bad.status_code == 400 and "unknown engine argument" in bad.json()["error"]


def canary_sessions(
    flavor: Flavor, sessions: int, concurrency: int, **faults: float
) -> tuple[TrafficReport, str]:
    """``sessions`` agent sessions through the gateway to a fleet of one canary replica of
    ``flavor`` (with ``faults``): the agents' report and the gateway's exported metrics."""
    specs = [ReplicaSpec("gpu-d", pool="canary", flavor=flavor)]
    with Fleet(specs, time_scale=1e-3) as fleet:
        fleet.replica("gpu-d").set_faults(**faults)
        exporter = fleet.gateway.serve()
        report = TrafficGenerator(
            fleet.urls()["gpu-d"],
            concurrency=concurrency,
            gateway=fleet.gateway,
            time_scale=1e-3,
            max_sessions=sessions,
        ).run()
        return report, CLIENT.get(f"{exporter}/metrics").text


def test_escalation_fault_makes_sessions_end_with_a_human() -> None:
    """With the model handing off every turn, almost every session escalates, per pool."""
    report, text = canary_sessions("vllm", 20, concurrency=5, escalation_rate=1.0)
    assert report.pools["canary"].handoffs > 0
    assert report.pools["canary"].escalations >= 15
    assert sample(text, "agent_sessions_total", pool="canary") == 20
    assert sample(text, "agent_escalations_total", pool="canary") == report.total("escalations")
    assert sample(text, "agent_tool_calls_total", pool="canary") == 0


def test_fleet_names_replicas_and_pools() -> None:
    """The reference fleet has three stable replicas and one canary on 8,192."""
    with Fleet.reference(time_scale=1e-4) as fleet:
        assert [r.name for r in fleet.replicas("stable")] == ["gpu-a", "gpu-b", "gpu-c"]
        assert fleet.replica("gpu-d").config.max_seq_len == 8192
        assert set(fleet.urls("canary")) == {"gpu-d"}
        with pytest.raises(KeyError, match="the fleet has gpu-a, gpu-b, gpu-c, gpu-d"):
            fleet.replica("gpu-z")
    with pytest.raises(ValueError, match="unique"):
        Fleet([ReplicaSpec("a"), ReplicaSpec("a")])


def test_traffic_must_be_bounded_and_stops_on_request() -> None:
    """run() needs a bound; a background run stops promptly on stop()."""
    with Replica("a", time_scale=1e-3) as replica:
        with pytest.raises(ValueError, match="bound the traffic"):
            TrafficGenerator(replica.url).run()
        generator = TrafficGenerator(replica.url, concurrency=4, time_scale=1e-3).start()
        deadline = time.monotonic() + 10
        while not generator.report.pools.get("stable", PoolTally()).sessions:
            assert time.monotonic() < deadline, "no session got an answer"
            time.sleep(0.01)
        started = time.monotonic()
        report = generator.stop()
        assert time.monotonic() - started < 1.0
        assert report.total("requests") > 0
        assert report.pools["stable"].sessions > 0


def test_gateway_exports_latency_and_token_histograms_per_pool() -> None:
    """Every answered request lands in one duration bucket and one token bucket; the
    buckets are cumulative, reach past 32,768 tokens, and agree with what the agents saw."""
    report, text = canary_sessions("triton", 6, concurrency=4)
    answered = report.pools["canary"].ok
    assert answered > 0
    count = sample(text, "agent_request_duration_seconds_count", pool="canary")
    assert count == answered
    assert sample(text, "agent_request_tokens_count", pool="canary") == answered
    assert sample(text, "agent_request_tokens_bucket", pool="canary", le="131072.0") == answered
    # Cumulative: the bucket holding the agents' own p95 holds at least 95% of requests.
    p95 = report.latency_quantile(0.95, "canary")
    assert p95 is not None
    edges = [0.25, 0.5, *range(1, 17), 18, 20, 25, 30, 40, 60, 90, 120]
    edge = next(e for e in edges if e >= p95)
    below = sample(text, "agent_request_duration_seconds_bucket", pool="canary", le=f"{edge:.1f}")
    assert 0.95 * answered <= below <= answered
    mean = sample(text, "agent_request_duration_seconds_sum", pool="canary") / count
    assert mean == pytest.approx(sum(report.pools["canary"].latencies) / answered)
