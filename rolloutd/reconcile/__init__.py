"""The imperative shell around the pure state machine: one tick of one rollout at a time.

``tick`` converges the world toward the stored desired facts, judges the gates, asks the
machine and writes its decision; ``perform`` is the one outcome boundary where attempts meet
the world; ``records`` turns rows into the machine's inputs and back; ``suites`` writes the
tool-argument suite's due runs and judges the stored ones; ``runs`` drives those runs on
their own (claimed, resumed, cancelled), outside the tick; ``shell`` holds the database, the
clocks and the leader's fence.
"""

from __future__ import annotations

from rolloutd.reconcile.perform import STUCK_AFTER_ATTEMPTS
from rolloutd.reconcile.shell import LEASE_MARGIN, NotLeading
from rolloutd.reconcile.tick import Reconciler, TickResult
from rolloutd.store.errors import StaleWrite

__all__ = [
    "LEASE_MARGIN",
    "STUCK_AFTER_ATTEMPTS",
    "NotLeading",
    "Reconciler",
    "StaleWrite",
    "TickResult",
]
