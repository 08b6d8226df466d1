"""No exposure is no data: a pool that should serve live traffic and has served none.

A canary that receives nothing is not a canary doing well, and it is not one still
gathering evidence either: a router that ignores the weight, or a splitter that sends
nothing, leaves every gate that needs the pool's traffic waiting for data that will not
come. Waiting (*pending*) counts toward no limit, so the rollout would sit at its step until
the progress deadline without a word of why. This module says when an empty pool is that
finding: the gate is then *inconclusive* with a reason an operator can act on, and counts
toward ``limits.max_inconclusive`` and the gate's ``on_no_data`` like any missing data.

Before the time since the step's weight was verified reaches the gate's own ``window``, an
empty pool is chance (a 30 s window at 5% may hold no session yet) and the gate waits as
before. A pool that serves no live traffic at this step (``Judging.idle``, the canary at
weight 0, stable at 100%) is not expected to have any.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from rolloutd.core.durations import format_duration
from rolloutd.gates.base import Judging, Pool

_NAMED: dict[Pool, str] = {"canary": "the canary", "stable": "the stable pool"}


def no_traffic(
    judging: Judging,
    exposure: Mapping[Pool, float | None],
    *,
    window: timedelta,
    over: timedelta | None = None,
) -> str | None:
    """Why the pools' ``exposure`` (requests, sessions or tool calls; None: not counted) is
    no data for a gate whose own window is ``window``, or None while it is not.

    ``over``: the window the exposure was counted over, when it is not the whole time since
    the step's weight was verified (a threshold gate counts its own ``window`` only); the
    reason names that time, so it never claims more than was measured.
    """
    verified = judging.step_started_at
    if verified is None or judging.now - verified <= window:
        # Too early to tell a router that ignores the weight from a quiet window: wait.
        return None
    empty = [
        pool
        for pool, seen in exposure.items()
        if seen is not None and seen <= 0 and _should_serve(judging, pool)
    ]
    if not empty:
        return None
    # Whole seconds: the time since a verification carries microseconds nobody reads.
    lasted = timedelta(seconds=round((over or judging.now - verified).total_seconds()))
    if len(empty) > 1:
        # Neither pool served: the split is not the suspect, the traffic (or its counting) is.
        return (
            f"neither pool received traffic for {format_duration(lasted)}: does any traffic "
            "reach the router?"
        )
    pool = empty[0]
    at = ""
    if judging.weight is not None:
        share = judging.weight if pool == "canary" else 100 - judging.weight
        at = f" at weight {share}%"
    return (
        f"{_NAMED[pool]} received no traffic for {format_duration(lasted)}{at}: does the "
        "router apply the weight?"
    )


def _should_serve(judging: Judging, pool: Pool) -> bool:
    """Whether ``pool`` should receive live requests at this step (unknown weight: yes)."""
    if judging.idle == pool:
        return False
    weight = judging.weight
    if weight is None:
        return True
    # A canary at 0% (mirrored or not) and stable at 100% are sent no live requests.
    return weight > 0 if pool == "canary" else weight < 100
