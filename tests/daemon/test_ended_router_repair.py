"""A rollout that ended keeps its router verified after a takeover, with real daemons.

The late write of a deposed leader is played by the test (a 30% router file written behind
rolloutd's back right after the takeover): freezing a real leader exactly between its
commit and its router write cannot be made deterministic from outside.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .helpers import (
    TAKEOVER_BOUND,
    WAIT,
    Daemons,
    Db,
    assert_within,
    canary,
    start_rollout_in,
    wait_until,
)

pytestmark = pytest.mark.postgres


def test_a_new_leader_repairs_a_late_write_to_a_rolled_back_rollouts_router(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """After a takeover, a 30% written to a rolled-back rollout's router returns to 0% (drift)."""
    old, heir = daemons.leader_and_standby()
    workspace, rollout = start_rollout_in(db, tmp_path, "one", [canary(30, "1h", gates=())])
    wait_until(lambda: workspace.router_weight() == 30, WAIT, "the leader to set 30%")
    workspace.write_metrics(oom_events=1)
    wait_until(
        lambda: "rolled_back" in db.event_kinds(rollout),
        WAIT,
        "the rollout to end rolled back",
    )
    assert workspace.router_weight() == 0

    old.kill()
    heir.wait_role("leader", TAKEOVER_BOUND + 5)
    document = {"canary_weight": 30, "stable_weight": 70, "mirror": False}
    tmp = workspace.dir / "late.tmp"
    tmp.write_text(json.dumps(document))
    os.replace(tmp, workspace.router_path)

    assert_within(lambda: workspace.router_weight() == 0, WAIT, "the heir to restore 0%")
    assert_within(lambda: "drift" in db.event_kinds(rollout), WAIT, "a drift event")
