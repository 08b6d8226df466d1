"""Prometheus going away mid-rollout: no gate passes on missing data, the rollout pauses
and alerts, and it carries on by itself once Prometheus is back."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.e2e.stack import Stack, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MAX_INCONCLUSIVE = 6


def test_a_prometheus_outage_pauses_the_rollout_and_it_resumes_when_prometheus_returns(
    stack_for: Callable[..., Stack],
) -> None:
    """With Prometheus stopped, every evaluation is inconclusive naming the refused
    connection, nothing is promoted, the rollout pauses with an ``inconclusive_limit`` alert
    after the plan's limit; restarted on the same port and data, the rollout completes."""
    stack = stack_for("triton")
    assert stack.prometheus is not None
    rollout = stack.start_rollout(
        stack.plan("e2e-prometheus-outage", max_inconclusive=MAX_INCONCLUSIVE, through_full=True)
    )
    stack.wait_verified(rollout, 5)

    stack.prometheus.stop()
    stopped_at = time.monotonic()
    last_event = stack.events(rollout)[-1]["id"]
    stack.wait_state(rollout, {"paused"}, 60)
    paused_after = time.monotonic() - stopped_at

    during = [e for e in stack.events(rollout) if e["id"] > last_event]
    assert [e["kind"] for e in during] == ["paused"], during
    assert f"more than {MAX_INCONCLUSIVE} inconclusive" in during[0]["detail"]
    assert "inconclusive_limit" in stack.alerts(rollout)
    latest = stack.evaluations(rollout)[-8:]
    assert latest and all(e["verdict"] == "inconclusive" for e in latest), latest
    assert all("cannot connect to Prometheus" in e["reason"] for e in latest), latest
    assert all("connection refused" in e["reason"] for e in latest), latest[0]["reason"]

    # Paused is paused: a few more ticks (each evaluates the gates again) change nothing on
    # the load balancer.
    def ticks() -> int:
        return len({e["evaluated_at"] for e in stack.evaluations(rollout)})

    seen = ticks()
    wait_until(lambda: ticks() >= seen + 3, 30, "three more ticks of the paused rollout")
    assert stack.state(rollout) == "paused"
    assert stack.weight() == 5

    stack.prometheus.start()
    stack.prometheus.wait_targets_up()
    wait_until(
        lambda: "resumed" in stack.event_kinds(rollout), 60, "the rollout to resume by itself"
    )
    assert stack.wait_state(rollout, {"completed", "rolled_back"}, 120) == "completed"
    assert stack.weight() == 100
    kinds = stack.event_kinds(rollout)
    assert kinds.index("paused") < kinds.index("resumed") < kinds.index("step_completed")
    print(f"paused {paused_after:.1f}s after Prometheus stopped")
