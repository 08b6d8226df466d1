"""Whole rollouts against real services: a clean canary reaches 100%, each fault rolls back.

Each test runs the simulated fleet behind a real HAProxy, a real Prometheus scraping it
every second, 16 agents sending sessions through HAProxy, Postgres, and the daemon with its
default drivers. The plan is canary 5% (bake 15 s) -> 25% (bake 15 s) -> full, gates over
30 s windows; the only thing read back is what HAProxy does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.e2e.stack import CANARY, Stack, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

StackFor = Callable[..., Stack]


def test_a_healthy_canary_reaches_100_percent(stack_for: StackFor) -> None:
    """With only baseline noise, every gate passes: 5% -> 25% -> 100% on HAProxy."""
    stack = stack_for("triton")
    rollout = stack.start_rollout(stack.plan("e2e-happy", through_full=True))
    stack.wait_verified(rollout, 5)
    # rolloutd's own /metrics, as the real Prometheus scraped it: leading, canary at 5%.
    prometheus = stack.prometheus
    assert prometheus is not None
    wait_until(
        lambda: (
            prometheus.value(f'rolloutd_rollout_canary_weight_percent{{rollout="{rollout}"}}') == 5
        ),
        15,
        "Prometheus to read the canary weight from rolloutd's /metrics",
    )
    assert prometheus.value('max(rolloutd_leader{job="rolloutd"})') == 1
    assert stack.wait_state(rollout, {"completed", "rolled_back", "paused"}, 90) == "completed"
    assert stack.weight() == 100
    kinds = stack.event_kinds(rollout)
    assert "rollback_started" not in kinds
    assert kinds.count("step_completed") == 4
    passes = {e["gate"] for e in stack.evaluations(rollout) if e["verdict"] == "pass"}
    assert passes >= {
        "latency_p95",
        "queue_timeouts",
        "schema_violations",
        "canary_oom",
        "capacity_assumption",
    }
    # The capacity watch read a real p99 from the gateway's token histogram: ~6,900 tokens.
    capacity = stack.evaluations(rollout, "capacity_assumption")[-1]
    assert 6000 < capacity["value"] < 8192 * 0.95, capacity


def test_longer_prompts_at_steady_state_invalidate_the_capacity_analysis(
    stack_for: StackFor,
) -> None:
    """Prompts 25% longer once the canary takes everything: the capacity watch fails with
    "the capacity analysis is invalid", alerts, and holds the rollout at 100% (no rollback:
    the build is not at fault, the plan's assumption is)."""
    stack = stack_for("vllm")
    rollout = stack.start_rollout(
        stack.plan("e2e-capacity", bakes=("5s", "5s"), steady="10m", through_full=True)
    )
    stack.wait_verified(rollout, 100, timeout=90)
    stack.set_faults(CANARY, prompt_drift=1.25)
    wait_until(
        lambda: "capacity_invalid" in stack.event_kinds(rollout), 90, "the capacity watch to fail"
    )
    (event,) = [e for e in stack.events(rollout) if e["kind"] == "capacity_invalid"]
    assert "the capacity analysis is invalid" in event["detail"], event
    assert "capacity_invalid" in stack.alerts(rollout)
    failed = [
        e for e in stack.evaluations(rollout, "capacity_assumption") if e["verdict"] == "fail"
    ]
    assert failed and failed[-1]["value"] >= 8192 * 0.95, failed[-1]
    assert stack.state(rollout) not in {"rolled_back", "rolling_back", "completed"}
    assert stack.weight() == 100


@dataclass(frozen=True)
class Fault:
    """A fault injected into the canary replica once HAProxy reads ``at_weight`` (0: before
    the rollout starts), and the gate that must catch it."""

    name: str
    flavor: str
    at_weight: int
    gate: str
    faults: dict[str, float]
    oom: bool = False
    bakes: tuple[str, str] = ("15s", "15s")

    def inject(self, stack: Stack) -> None:
        stack.set_faults(CANARY, **self.faults, **({"oom": True} if self.oom else {}))


FAULTS = [
    # vLLM: the engine's e2e histogram gives the latency gate anytime bounds at bucket edges.
    Fault("latency +50%", "vllm", 5, "latency_p95", {"latency_factor": 1.5}),
    # Triton: the agent gateway's duration histogram is the p95 stock Triton lacks.
    Fault("latency +50% on Triton", "triton", 5, "latency_p95", {"latency_factor": 1.5}),
    Fault("queue timeouts 1% -> 6%", "triton", 5, "queue_timeouts_breach", {"timeout_rate": 0.06}),
    Fault("OOM on the canary", "triton", 5, "canary_oom", {}, oom=True),
    Fault("OOM on a vLLM canary", "vllm", 5, "canary_oom", {}, oom=True),
    # At 25% a 30 s window holds the 500 tool calls the 1% trigger waits for.
    Fault(
        "schema violations 0.3% -> 2%",
        "triton",
        25,
        "schema_violations_breach",
        {"schema_violation_rate": 0.02},
    ),
    # From the start: a 5% -> 8% rise needs a few hundred escalations to show at alpha 0.05.
    Fault("escalations 5% -> 8%", "triton", 0, "escalations_not_rising", {"escalation_rate": 0.03}),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_a_fault_on_the_canary_rolls_back_to_weight_0(stack_for: StackFor, fault: Fault) -> None:
    """The fault's gate breaches, the daemon rolls back, and HAProxy reads 0% canary."""
    stack = stack_for(fault.flavor)
    if fault.at_weight == 0:
        fault.inject(stack)
    rollout = stack.start_rollout(stack.plan(f"e2e-{fault.gate}", bakes=fault.bakes))
    if fault.at_weight:
        stack.wait_verified(rollout, fault.at_weight, timeout=60)
        fault.inject(stack)
    injected = time.monotonic()
    state = stack.wait_state(rollout, {"rolled_back", "completed", "paused"}, 90)
    took = time.monotonic() - injected
    assert state == "rolled_back", stack.event_kinds(rollout)
    assert stack.weight() == 0
    (started,) = [e for e in stack.events(rollout) if e["kind"] == "rollback_started"]
    assert started["data"].get("gate") == fault.gate, started["detail"]
    print(f"{fault.name}: rolled back {took:.1f}s after the fault: {started['detail']}")
