"""A step gate is judged once per interval, on time, however the ticks jitter."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select

from rolloutd.store.models import GateEvaluation
from tests.plans import memory_plan
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

INTERVAL = timedelta(seconds=30)
TICK = timedelta(seconds=10)
INTERVALS = 100
JITTER_MS = 5


def test_a_step_gate_is_judged_every_interval_when_ticks_jitter_by_milliseconds(
    store: StoreHandle,
) -> None:
    """Ticks every 10 s, each a few milliseconds early or late: over 100 intervals of 30 s
    the step gate is judged 100 times, each 30 s after the last within the ticks' jitter,
    never a trigger tick late."""
    h = Harness(store, plan=memory_plan(interval="30s", trigger_interval="10s"))
    h.tick()
    start = h.clock()
    jitter = random.Random(35)
    for k in range(1, 3 * INTERVALS + 3):
        late = timedelta(milliseconds=jitter.uniform(-JITTER_MS, JITTER_MS))
        h.clock.now = start + k * TICK + late
        assert h.tick() == "running"
    with store.sessions() as session:
        judged = list(
            session.scalars(
                select(GateEvaluation.evaluated_at)
                .where(GateEvaluation.rollout_id == h.rollout_id, GateEvaluation.role == "step")
                .order_by(GateEvaluation.evaluated_at)
            )
        )
    first = judged[0]
    # The judgements due in 100 intervals: the first, and one every 30 s after it.
    within = [t for t in judged if t < first + INTERVALS * INTERVAL - INTERVAL / 2]
    assert len(within) == INTERVALS
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(within)]
    tolerance = 2 * JITTER_MS / 1000
    late = [g for g in gaps if abs(g - INTERVAL.total_seconds()) > tolerance]
    assert late == [], f"{len(late)} of {len(gaps)} gaps off 30 s: {sorted(set(late))[:5]}"
