"""A Slack outage of minutes in the middle of a rollback loses no alert (time compressed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.outbox.harness import SECRET, Harness
from tests.outbox.slack import SlackServer

if TYPE_CHECKING:
    from conftest import StoreHandle


def test_a_slack_outage_during_a_rollback_loses_no_alert(store: StoreHandle) -> None:
    """Slack fails (500, then hangs) for five minutes while a rollback starts and finishes;
    once it is back every alert arrives, once, in order, and none is given up."""
    with SlackServer(clock=lambda: None) as slack:  # type: ignore[arg-type, return-value]
        ops, oncall = slack.webhook(f"ops-{SECRET}"), slack.webhook(f"oncall-{SECRET}")
        h = Harness(store, {"SLACK_WEBHOOK_OPS": ops, "SLACK_WEBHOOK_ONCALL": oncall}, timeout=0.2)
        slack.clock = h.clock
        assert h.tick() == "running"
        h.send(runs=4)
        before = len(slack.delivered())

        slack.mode = "rollup_error"  # the outage starts
        h.metrics.set("oom_events", "canary", 1)
        assert h.tick(seconds=5) == "rolling_back"
        h.send(runs=240, every=0.5)  # two minutes of 500s
        assert h.tick(seconds=5) == "rolled_back"
        slack.mode = "hang"  # then three minutes of silence
        h.send(runs=360, every=0.5)
        assert len(slack.delivered()) == before

        slack.mode = "ok"  # Slack is back
        slack.release.set()
        h.send(runs=200, every=0.5)

    rows = h.outbox()
    assert {r["topic"] for r in rows} >= {"rollback_started", "rolled_back"}
    assert all(r["status"] == "sent" for r in rows), rows
    for channel, suffix in (("ops", f"ops-{SECRET}"), ("oncall", f"oncall-{SECRET}")):
        expected = [r["message"]["text"] for r in rows if r["channel"] == channel]
        assert slack.delivered(suffix) == [r["message"] for r in rows if r["channel"] == channel]
        assert len(expected) == len(set(expected))
    assert slack.answered(429) == 0
    assert not [e for e in h.events() if e["kind"].startswith("alert_")]
    # The critical rollback alert went to both channels; the info "rolled back" to ops only.
    routed = {(r["topic"], r["channel"]) for r in rows}
    assert {("rollback_started", "ops"), ("rollback_started", "oncall")} <= routed
    assert ("rolled_back", "ops") in routed and ("rolled_back", "oncall") not in routed
