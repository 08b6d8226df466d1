"""Where a canary-vs-stable test looks: the windows of the steps a gate judged.

Pure functions of the plan, the progress facts and the steps' verified/completed times. A
compare gate's validity rests on them: the every-tick test carries evidence from the earlier
steps' windows, and the final look must see the same data however often it is asked, so its
end is fixed once the bake has passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from rolloutd.core.nodata import bake_of
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress
from rolloutd.gates.base import FinalWindow, Role


def earlier_windows(
    plan: Plan,
    gate: str,
    role: Role,
    progress: Progress,
    verified: Mapping[int, datetime | None],
    completed: Mapping[int, datetime | None],
) -> tuple[tuple[datetime, datetime], ...]:
    """The (verified, completed) windows of the steps before this one that judged ``gate``
    (a trigger judges every step) while both pools served traffic."""
    windows = []
    for i in range(progress.step_index):
        if role == "step" and gate not in plan.steps[i].gates:
            continue
        if plan.idle_pool(i) is not None:
            continue
        start, end = verified.get(i), completed.get(i)
        if start is not None and end is not None and end > start:
            windows.append((start, end))
    return tuple(windows)


def final_window(
    plan: Plan,
    gate: str,
    progress: Progress,
    verified: Mapping[int, datetime | None],
    now: datetime,
) -> FinalWindow | None:
    """Where a gate's final look looks, if this is the last step that carries the gate.

    It starts when the first step carrying the gate was verified on the router and ends
    where this step's bake clock reached the bake (paused time excluded); ``end`` is None
    until then. The end is fixed once passed, so every later look sees the same data.
    """
    carrying = [i for i, step in enumerate(plan.steps) if gate in step.gates]
    if not carrying or carrying[-1] != progress.step_index:
        return None
    start = verified.get(carrying[0]) or progress.step_verified_at
    if start is None:
        return None
    hold = plan.steps[progress.step_index].hold_for().total_seconds()
    baked = progress.baked(now).total_seconds()
    if baked < hold:
        return FinalWindow(start, None)
    if progress.bake_mark is not None and progress.baked_seconds <= hold:
        return FinalWindow(
            start, progress.bake_mark + timedelta(seconds=hold - progress.baked_seconds)
        )
    return FinalWindow(start, now - timedelta(seconds=baked - hold))


def bake_over(plan: Plan, progress: Progress, now: datetime) -> bool:
    """Whether the step ran its whole bake (as far as it was promoted, paused time
    excluded): a comparison with too few events then passes on what the step showed. A
    step without a bake has no whole to judge."""
    hold = bake_of(plan, progress)
    return hold > timedelta(0) and progress.baked(now) >= hold
