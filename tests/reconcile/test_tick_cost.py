"""What a tick costs in work that does not grow with anything useful: counted, never timed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import yaml

from rolloutd import operations
from rolloutd.operations import start_rollout
from rolloutd.planfile import LoadedPlan, parse_plan
from tests.plans import NO_EXECUTOR
from tests.reconcile.test_reconcile import PLAN, Harness

if TYPE_CHECKING:
    from conftest import StoreHandle


def test_a_plan_is_parsed_once_per_content_hash_across_a_hundred_ticks(
    store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 ticks each of two rollouts of two plans parse each plan once; a later rollout of
    the first plan, its text changed only by a comment, parses nothing."""
    parsed: list[str] = []

    def counting(text: str, source: str) -> LoadedPlan:
        parsed.append(source)
        return parse_plan(text, source)

    monkeypatch.setattr(operations, "_plans", type(operations._plans)())
    monkeypatch.setattr(operations, "parse_plan", counting)
    h = Harness(store)
    with store.sessions.begin() as session:
        production = {**PLAN, "environment": "production", "executor": NO_EXECUTOR}
        other = parse_plan(yaml.safe_dump(production), "other.yaml")
        second = start_rollout(session, other, actor="alice", now=h.clock())
    for _ in range(100):
        h.tick(seconds=5)
        h.reconciler.tick(second)
    assert h.tick() == "running"
    assert len(parsed) == 2, parsed

    h.command("abort", "done measuring")
    while h.tick(seconds=5) != "rolled_back":
        pass
    with store.sessions.begin() as session:
        again = parse_plan("# the same plan\n" + yaml.safe_dump(PLAN), "again.yaml")
        third = start_rollout(session, again, actor="alice", now=h.clock())
    for _ in range(10):
        h.reconciler.tick(third)
        h.clock.advance(seconds=5)
    assert len(parsed) == 2, parsed
