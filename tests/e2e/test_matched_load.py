"""The latency gate at matched load on the real thing: a one-to-one vLLM fleet behind HAProxy
at 5%, scraped every second by Prometheus, judged through the Prometheus source.

At 5% the one canary replica carries a twentieth of the stable replica's load, so the load
floor alone would hold every pass (``pending: canary underloaded``). The agents alternate
between one and sixteen at a time, as load moves through a day: stable spends part of the
time at the canary's concurrency, and the comparison is made there."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.gates.base import Evaluation, Judging
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import load_templates
from rolloutd.planfile import parse_plan
from tests.e2e.services import SCRAPE_INTERVAL_S
from tests.e2e.stack import CANARY, Stack
from tests.routers.services import find_binary

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PHASE_S = 8.0
BASE = 0.7
PHASES = 8  # 64 s of traffic a condition
# End-to-end latency: the simulated engine's time to first token is a 6,000-token prefill
# that load barely changes, all of it inside one bucket of vLLM's TTFT histogram (1-2.5 s),
# which no gate can split (the gate says so); its decode slows with every sequence running.
LATENCY = {
    "kind": "latency",
    "signal": "e2e_latency",
    "target_seconds": 60.0,
    "max_ratio": 1.1,
    "window": "60s",
}
MATCHED = {**LATENCY, "match_load": {"slice": "4s", "min_requests": 20}}
UNMATCHED = {**LATENCY, "min_load_ratio": 0}


def _plan(stack: Stack) -> Plan:
    data = stack.plan("e2e-matched-load")
    data["gates"].update({"matched": MATCHED, "unmatched": UNMATCHED, "floor": LATENCY})
    return parse_plan(yaml.safe_dump(data, sort_keys=False), "e2e-matched-load.yaml").plan


def _moving_load(stack: Stack) -> datetime:
    """One and sixteen agents in turn for ``PHASES`` phases; returns when it ended."""
    assert stack.fleet is not None
    for phase in range(PHASES):
        stack.fleet.set_agents(1 if phase % 2 == 0 else 16)
        time.sleep(PHASE_S)
    time.sleep(2 * SCRAPE_INTERVAL_S)  # the last scrapes land
    return datetime.now(UTC)


def _judge(plan: Plan, source: PrometheusMetrics, gate: str, now: datetime) -> Evaluation:
    started = now - timedelta(seconds=PHASE_S * PHASES)
    judging = Judging(gate, "step", source, now, plan, started, weight=5)
    return evaluate_gate(plan.gates[gate], judging)


def test_latency_at_matched_load_passes_an_as_fast_canary_and_fails_a_slower_one(
    pg_store: StoreHandle,
) -> None:
    """Same build: the floor holds the pass, matching passes it and names stable's busier
    bands as not judged. Then the canary turns 30% slower at every load yet stays faster
    than stable overall (it is idle): compared over all requests the gate does not fail
    it; at matched load it fails."""
    find_binary("prometheus")
    find_binary("haproxy")
    stack = Stack(pg_store.url, "vllm", topology="one-to-one")
    try:
        stack.start()
        assert stack.haproxy is not None and stack.prometheus is not None
        stack.haproxy.router().set_weight(5)
        # Both engines a little faster, so that their median request sits at the 5 s edge of
        # vLLM's latency buckets (which skip from 5 s to 10 s): a histogram can split them.
        for replica in ("gpu-a", CANARY):
            stack.set_faults(replica, latency_factor=BASE)
        plan = _plan(stack)
        source = PrometheusMetrics(
            stack.prometheus.url,
            load_templates("vllm"),
            scrape_interval=timedelta(seconds=SCRAPE_INTERVAL_S),
        )

        now = _moving_load(stack)
        floor = _judge(plan, source, "floor", now)
        assert floor.verdict is Verdict.PENDING and "canary underloaded" in floor.reason, floor
        same = _judge(plan, source, "matched", now)
        assert same.verdict is Verdict.PASS, f"{same.reason} {_bands(same)}"
        assert "the canary never carried that load" in same.reason

        stack.set_faults(CANARY, latency_factor=BASE * 1.3)
        now = _moving_load(stack)
        slower = _judge(plan, source, "matched", now)
        assert slower.verdict is Verdict.FAIL, f"{slower.reason} {_bands(slower)[0]}"
        assert slower.reason.startswith("canary slower than stable at the same load")
        overall = _judge(plan, source, "unmatched", now)
        assert overall.verdict is not Verdict.FAIL, (overall.reason, overall.evidence)
    finally:
        stack.close()


def _bands(evaluation: Evaluation) -> Any:
    matched = evaluation.evidence.get("matched_load", {})
    return matched.get("bands"), matched.get("not_judged")
