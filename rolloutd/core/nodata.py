"""Missing data, judged per gate: no traffic is no data, and no data is never a pass.

A gate lacks data when it has had more inconclusive evaluations in a row than the plan's
limit, or when its step asks for ``min_samples`` and, the bake and the bake's extension
over, the gate's newest evaluation still rests on fewer. What follows is the gate's
``on_no_data`` (the plan's ``limits.on_inconclusive`` when it names none): hold, roll back,
or hold and roll back once the gate has gone ``rollback_after`` without data.

``rollback_after`` runs on the rollout clock (the ``now`` the machine is given), paused time
included: a hold pauses the rollout and stops the bake clock, so bake time would never run
out. Pure, like the machine that asks: plan, progress, verdicts and ``now`` in, answers out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from rolloutd.core.actions import GateResult, Verdict
from rolloutd.core.durations import format_duration
from rolloutd.core.plan import PauseStep, Plan, RollbackAfter
from rolloutd.core.progress import Progress


@dataclass(frozen=True)
class Lack:
    """Why one gate has no data, and since when (where ``rollback_after`` counts from)."""

    why: str
    since: datetime


def over_limit(
    plan: Plan,
    progress: Progress,
    now: datetime,
    verdicts: Mapping[str, GateResult] | None = None,
) -> dict[str, Lack]:
    """The gates with more inconclusive evaluations in a row than ``limits.max_inconclusive``,
    in name order; each lacks data since its streak's first inconclusive evaluation, and
    says why its newest evaluation (in ``verdicts``) had none."""
    limit = plan.limits.max_inconclusive
    why = f"more than {limit} inconclusive evaluations in a row"
    lacking = {}
    for gate, count in sorted(progress.inconclusive_streaks.items()):
        if count <= limit:
            continue
        newest = (verdicts or {}).get(gate)
        said = why
        # The count alone tells nobody what to fix; the gate's own reason does ("does the
        # router apply the weight?", "cannot connect to Prometheus").
        if newest is not None and newest.reason and newest.verdict in _NO_DATA:
            said = f"{why} (newest: {newest.reason})"
        lacking[gate] = Lack(said, progress.no_data_since.get(gate, now))
    return lacking


_NO_DATA = frozenset({Verdict.INCONCLUSIVE, Verdict.PENDING})


def short_of_samples(
    plan: Plan, progress: Progress, verdicts: Mapping[str, GateResult]
) -> dict[str, tuple[int, int]]:
    """Gate -> (samples seen, samples needed) for the current step's gates below its
    ``min_samples``. Only an evaluation made since the step was reached counts; none at all,
    a failed one, or one that counts no samples, has seen 0."""
    step = plan.steps[progress.step_index]
    verified_at = progress.step_verified_at
    if verified_at is None or isinstance(step, PauseStep):
        return {}
    short = {}
    for gate, needed in step.min_samples.items():
        result = verdicts.get(gate)
        fresh = result is not None and result.evaluated_at >= verified_at
        seen = (result.samples or 0) if result is not None and fresh else 0
        if seen < needed:
            short[gate] = (seen, needed)
    return short


def bake_of(plan: Plan, progress: Progress) -> timedelta:
    """How long the current step must bake: its own hold, or as far as it was promoted."""
    if progress.promoted:
        return timedelta(seconds=progress.promoted_after_seconds)
    return plan.steps[progress.step_index].hold_for()


def gives_up(plan: Plan, gate: str, lack: Lack, now: datetime) -> str | None:
    """Why ``gate``'s ``on_no_data`` rolls back now, or None while it holds."""
    rule = plan.gates[gate].no_data(plan.limits)
    if isinstance(rule, RollbackAfter):
        without = now - lack.since
        if without < rule.rollback_after:
            return None
        return f"{lack.why}, without data for {format_duration(without)}"
    return lack.why if rule == "rollback" else None


def describe(lacking: Mapping[str, Lack]) -> str:
    """``a, b: why; c: another why``: gates lacking data for the same reason named together."""
    by_reason: dict[str, list[str]] = {}
    for gate, lack in lacking.items():
        by_reason.setdefault(lack.why, []).append(gate)
    return "; ".join(f"{', '.join(gates)}: {why}" for why, gates in by_reason.items())


def extension_notice(
    plan: Plan, progress: Progress, short: Mapping[str, tuple[int, int]]
) -> tuple[str, dict[str, object]]:
    """The words and the data of a ``step_extended`` event and alert."""
    step = plan.steps[progress.step_index]
    lacking = ", ".join(f"{g} ({seen} of {needed})" for g, (seen, needed) in short.items())
    detail = (
        f"{plan.step_named(progress.step_index)} extended by up to "
        f"{format_duration(step.extension())}: short of samples: {lacking}"
    )
    data: dict[str, object] = {
        "step_name": step.title(),
        "max_extension_seconds": step.extension().total_seconds(),
        "gates": {g: {"samples": seen, "needed": needed} for g, (seen, needed) in short.items()},
    }
    return detail, data
