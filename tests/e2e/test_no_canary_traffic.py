"""A canary the load balancer never sends a session to, while it reads back 5%: no traffic is
no data. The compare gate turns inconclusive once the step outlasts its window, the rollout
pauses at the plan's limit, and the pause and ``rolloutctl status`` both ask about the router,
instead of the step waiting, pending, until its progress deadline."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from tests.cli import Ctl
from tests.e2e.stack import CANARY, Stack

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MAX_INCONCLUSIVE = 3
GATE = "escalations_not_rising"
NO_TRAFFIC = re.compile(
    r"the canary received no traffic for (\d+[dhms])+ at weight 5%: "
    r"does the router apply the weight\?"
)


def misroute(stack: Stack, server: str, to: str) -> None:
    """Point HAProxy's ``server`` at replica ``to``'s address, out of band (the runtime API,
    as a mistyped deployment would): its weight stands, and reads back, but every session
    the weight gives it lands on ``to``."""
    assert stack.haproxy is not None and stack.fleet is not None
    host, port = stack.fleet.replica(to).url.split("://", 1)[1].rstrip("/").split(":")
    answer = stack.haproxy.router().api.ask(f"set server llm/{server} addr {host} port {port}")
    assert "changed" in answer, answer


def test_a_canary_without_traffic_at_5_percent_pauses_naming_the_router(
    stack_for: Callable[..., Stack],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """HAProxy's canary server points at a stable replica: the router reads 5% back, the
    canary engine serves nothing. The 5% step's compare gate (window 10 s) is pending at
    first, then inconclusive naming the router; after the limit the rollout pauses with that
    reason in the pause event, its alert and ``rolloutctl status``, and no step completes.

    The plan judges the 5% step by the compare gate alone, with only the OOM trigger: under
    Prometheus a ratio or quantile over no requests is 0/0, inconclusive for that reason
    from the first tick, which would pause the rollout before the compare gate speaks."""
    stack = stack_for("triton")
    assert stack.fleet is not None
    misroute(stack, CANARY, stack.fleet.pool("stable")[0].name)
    plan = stack.plan(
        "e2e-no-canary-traffic",
        max_inconclusive=MAX_INCONCLUSIVE,
        gate_overrides={GATE: {"window": "10s"}},
    )
    plan["steps"][0]["gates"] = [GATE]
    plan["rollback"]["triggers"] = ["canary_oom"]
    rollout = stack.start_rollout(plan)
    verified = stack.wait_verified(rollout, 5)

    assert stack.wait_state(rollout, {"paused", "completed", "rolled_back"}, 90) == "paused"
    paused_after = time.monotonic() - verified
    assert stack.weight() == 5  # the router still reads the weight it ignores
    (paused,) = [e for e in stack.events(rollout) if e["kind"] == "paused"]
    prefix = f"paused: {GATE}: more than {MAX_INCONCLUSIVE} inconclusive evaluations in a row"
    assert paused["detail"].startswith(f"{prefix} (newest: the canary"), paused["detail"]
    assert NO_TRAFFIC.search(paused["detail"]), paused["detail"]
    assert "inconclusive_limit" in stack.alerts(rollout)
    assert "step_completed" not in stack.event_kinds(rollout)

    said = [(e["verdict"], e["reason"]) for e in stack.evaluations(rollout, GATE)]
    router = [i for i, (_, reason) in enumerate(said) if NO_TRAFFIC.fullmatch(reason)]
    # Pending while the step is younger than the gate's window, no data after it, to the end.
    assert len(router) > MAX_INCONCLUSIVE and router[-1] == len(said) - 1, said
    assert all(said[i][0] == "inconclusive" for i in router), said
    waited = said[: router[0]]
    assert ("pending", "no canary exposure") in [(v, r[:18]) for v, r in waited], said

    ctl = Ctl.on(stack.database_url, monkeypatch, capsys)
    status = ctl.json("status", str(rollout))
    assert (status["state"], status["paused"], status["weight"]) == ("paused", "inconclusive", 5)
    (gate,) = [g for g in status["gates"] if g["name"] == GATE]
    assert gate["verdict"] == "inconclusive"
    assert NO_TRAFFIC.fullmatch(gate["reason"]), gate["reason"]
    code, shown, _ = ctl("status", str(rollout))
    assert code == 0
    assert "does the router apply the weight?" in " ".join(shown.split()), shown
    print(f"paused {paused_after:.1f}s after 5% was verified")
