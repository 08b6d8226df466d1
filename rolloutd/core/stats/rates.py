"""The compare gate's statistics on counts: the every-tick rate-ratio test and the final look.

:func:`compare_rates` takes each step as a list of consecutive blocks of counts (events and
exposure on both pools), divides the every-tick evidence by an upper bound on the blocks'
dispersion, and makes the stratified final look when the last step's blocks are given; the
two share alpha (a union bound). :class:`RateOutcome` is what that says, before it is worded:
the one place its rules live, shared by the gate (``rolloutd.gates.comparisons``) and
``bench/gate_statistics.py``. Numbers in, a verdict out: where the counts come from is the
gate's business.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rolloutd.core.actions import Verdict
from rolloutd.core.stats.sequential import Segment, SequentialResult, rate_ratio_test
from rolloutd.core.stats.stratified import (
    Dispersion,
    StratifiedLook,
    Tally,
    estimate_dispersion,
    stratified_test,
    total,
)


class RateOutcome(enum.Enum):
    """What a comparison says, before it is worded: the one place its rules live, shared by
    the gate and ``bench/gate_statistics.py``."""

    FAIL_EVERY_TICK = "fail: the every-tick test"
    FAIL_FINAL = "fail: the final look"
    PENDING_FINAL = "pending: the final look comes when the bake is over"
    PENDING_DISPERSION = "pending: too few blocks to show how events cluster"
    PENDING_EVENTS = "pending: too few events to show the canary worse"
    PASS_STEP_OVER = "pass: the step is over with too few events to show a difference"
    PASS = "pass"

    @property
    def verdict(self) -> Verdict:
        """The gate's verdict for this outcome."""
        if self in (RateOutcome.FAIL_EVERY_TICK, RateOutcome.FAIL_FINAL):
            return Verdict.FAIL
        if self in (RateOutcome.PASS, RateOutcome.PASS_STEP_OVER):
            return Verdict.PASS
        return Verdict.PENDING


@dataclass(frozen=True)
class RateComparison:
    """What :func:`compare_rates` found: the every-tick test, and the final look if made."""

    sequential: SequentialResult
    dispersion: Dispersion
    final: StratifiedLook | None
    needed: int
    """Events (both pools, all steps) before a pass says anything."""
    looks: bool = False
    """Whether this step makes the final look (``final`` None until its bake is over)."""

    def outcome(self, *, bake_over: bool) -> RateOutcome:
        """The comparison's outcome at a tick; ``bake_over``: the step's bake has passed.

        A failure of either test stands. Where the final look is made it decides: a
        canary it does not find worse passes, however few its events (zero is evidence).
        Before it, or at a step without one, a pass needs enough blocks to bound the
        dispersion and enough events that the test could have failed; once the step's
        bake is over, a step that never held that many passes on what it showed.
        """
        if self.sequential.reject:
            return RateOutcome.FAIL_EVERY_TICK
        if self.looks:
            if self.final is None:
                return RateOutcome.PENDING_FINAL
            return RateOutcome.FAIL_FINAL if self.final.reject else RateOutcome.PASS
        if math.isinf(self.dispersion.bound):
            return RateOutcome.PASS_STEP_OVER if bake_over else RateOutcome.PENDING_DISPERSION
        if self.sequential.total_events < self.needed:
            return RateOutcome.PASS_STEP_OVER if bake_over else RateOutcome.PENDING_EVENTS
        return RateOutcome.PASS


def compare_rates(
    steps: Sequence[Sequence[Tally]],
    *,
    alpha: float,
    sequential_share: float = 1.0,
    final: Sequence[Sequence[Tally]] | None = None,
    min_events: int | None = None,
    clustered: bool = True,
    looks: bool = False,
) -> RateComparison:
    """The compare gate's statistics on counts: each step a list of consecutive blocks.

    Every tick: the one-sided rate-ratio mixture over the steps (each with its measured
    canary share) at ``alpha * sequential_share``, its evidence divided by an upper bound on
    the dispersion of the blocks (``clustered``; otherwise by 1). With ``final`` (the steps'
    blocks up to the end of the last bake): the stratified test over those blocks at the
    rest of alpha. Steps without exposure on a pool carry no evidence and are left out.
    ``looks``: this step makes the final look, so no pass before ``final`` is given.

    :raises ValueError: no step with exposure on both pools, or counts that are not counts.
    """
    judged = [blocks for blocks in steps if total(blocks).share is not None]
    if not judged:
        raise ValueError("no step with traffic on both pools: nothing to compare")
    known = None if clustered else 1.0
    dispersion = estimate_dispersion(judged, known=known)
    segments = []
    for blocks in judged:
        whole = total(blocks)
        segments.append(Segment(whole.canary_events, whole.stable_events, _share(whole)))
    sequential = rate_ratio_test(
        segments, alpha=alpha * sequential_share, dispersion=dispersion.bound
    )
    look = None
    if final is not None:
        look = stratified_test(
            final,
            alpha=alpha * (1.0 - sequential_share),
            dispersion=estimate_dispersion(final, known=known),
        )
    needed = min_events
    if needed is None:
        rho = min(segments[-1].rho, 0.99)
        needed = events_to_fail(rho, alpha * sequential_share)
        if math.isfinite(dispersion.bound):
            needed = math.ceil(dispersion.bound * needed)
    return RateComparison(sequential, dispersion, look, needed, looks or final is not None)


@functools.lru_cache(maxsize=256)
def _events_to_fail(rho_permille: int, alpha: float) -> int:
    rho = max(rho_permille, 1) / 1000
    for n in range(1, 100_000):
        if rate_ratio_test([Segment(n, 0, rho)], alpha=alpha).reject:
            return n
    return 100_000


def events_to_fail(rho: float, alpha: float) -> int:
    """The fewest events that, all on the canary at share ``rho``, reject at ``alpha``: below
    it the test cannot fail, so a pass would say nothing."""
    return _events_to_fail(round(rho * 1000), alpha)


def _share(tally: Tally) -> float:
    share = tally.share
    assert share is not None
    return share
