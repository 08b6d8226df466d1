"""The reference change (max_seq_len 32,768 -> 8,192) under the reference agent workload."""

from __future__ import annotations

import pytest

from rolloutd.sim.config import REFERENCE_CANARY, REFERENCE_STABLE, EngineConfig
from rolloutd.sim.engine import Replica
from rolloutd.sim.traffic import TrafficGenerator, TrafficReport

TIME_SCALE = 0.02  # 100 simulated seconds of traffic in 2 wall seconds


def drive(config: EngineConfig, sessions: int) -> TrafficReport:
    """Run ``sessions`` concurrent agent sessions against one replica for 2 wall seconds."""
    with Replica("gpu-x", config=config, time_scale=TIME_SCALE) as replica:
        generator = TrafficGenerator(
            replica.url, concurrency=sessions, time_scale=TIME_SCALE, duration_s=2.0, seed=11
        )
        return generator.run()


@pytest.mark.parametrize("sessions", [40, 60])
def test_max_seq_len_8192_lowers_p95_latency_and_queue_timeouts(sessions: int) -> None:
    """At 40 and 60 sessions, 8,192 beats 32,768 on p95 latency and queue timeouts."""
    before = drive(REFERENCE_STABLE, sessions)
    after = drive(REFERENCE_CANARY, sessions)
    assert before.total("requests") > 100 and after.total("requests") > 100
    p95_before, p95_after = before.latency_quantile(0.95), after.latency_quantile(0.95)
    assert p95_before is not None and p95_after is not None
    assert p95_after < 0.7 * p95_before
    assert before.rate("timeouts") > 0.05, "32,768 cannot carry this many sessions"
    assert after.rate("timeouts") < 0.01
    assert p95_after < 25.0, "near the plan's 14 s target, queueing aside"
