"""How likely a compare gate's final look is to see the regression its plan says it must.

A small regression (escalations 5% -> 6%) is judged by the final look: one stratified
(Cochran-Mantel-Haenszel) test over every step carrying the gate, at the share of ``alpha``
the every-tick test leaves (``rolloutd.core.stats.stratified``). Whether it can see the
regression is a question of exposure, which the plan fixes before the rollout starts: the
weights of the steps, how long each bakes, and how much traffic there is. With the plan's
``traffic`` and a gate's ``detect: {from, to}``, :func:`power_warnings` computes that chance
and, when it is below the gate's ``power``, how long the last step must bake to reach it.

The arithmetic is the normal approximation of the statistic the gate computes. At a step of
``T`` units (sessions, or requests) with canary share ``r``, stable rate ``p0`` and canary
rate ``p1``, the canary's events less those expected at its share have mean
``r (1 - r) T (p1 - p0)``; under no difference their variance is ``r (1 - r) T pbar (1 -
pbar)`` (the test's own, ``pbar`` the step's pooled rate), and at the regression it is
``r (1 - r) T ((1 - r) p1 q1 + r p0 q0)``. Summed over the steps, each variance times the
gate's dispersion, the chance that the one-sided statistic exceeds its critical value is

    power = Phi((mu - z * sqrt(phi * V0)) / sqrt(phi * V1)).

It leaves out the every-tick test (which, spending a fifth of alpha, adds a little) and the
canary's share falling short of its weight, so it errs low by a little; it is checked
against the gate's own final look on simulated counts in ``tests/core/test_power.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from statistics import NormalDist

from rolloutd.core.durations import format_duration
from rolloutd.core.plan import CompareGate, Plan

#: Past this a bake is not a plan: the message says "more than" it.
LONGEST_BAKE = timedelta(days=60)


@dataclass(frozen=True)
class Stretch:
    """A step carrying the gate, as the final look sees it: its canary share and length."""

    share: float
    """The canary's share of sessions (its weight, 0-1 exclusive)."""
    minutes: float


def final_look_power(
    stretches: Sequence[Stretch],
    *,
    units_per_minute: float,
    baseline: float,
    regressed: float,
    alpha: float,
    dispersion: float = 1.0,
) -> float:
    """The chance that the final look over ``stretches`` rejects at level ``alpha`` when
    stable's rate is ``baseline`` and the canary's ``regressed``."""
    mean = null = alternative = 0.0
    for stretch in stretches:
        r, units = stretch.share, units_per_minute * stretch.minutes
        pooled = r * regressed + (1.0 - r) * baseline
        weight = r * (1.0 - r) * units
        mean += weight * (regressed - baseline)
        null += weight * pooled * (1.0 - pooled)
        alternative += weight * (
            (1.0 - r) * regressed * (1.0 - regressed) + r * baseline * (1.0 - baseline)
        )
    if alternative <= 0.0:
        return 0.0
    critical = NormalDist().inv_cdf(1.0 - alpha)
    z = (mean - critical * math.sqrt(dispersion * null)) / math.sqrt(dispersion * alternative)
    return NormalDist().cdf(z)


def minutes_needed(
    stretches: Sequence[Stretch],
    target: float,
    *,
    units_per_minute: float,
    baseline: float,
    regressed: float,
    alpha: float,
    dispersion: float = 1.0,
    longest: float = LONGEST_BAKE.total_seconds() / 60,
) -> float | None:
    """How long the last stretch must last for the look to reach power ``target`` (the
    earlier ones as they are); None when even ``longest`` minutes do not."""

    def power(minutes: float) -> float:
        last = Stretch(stretches[-1].share, minutes)
        return final_look_power(
            [*stretches[:-1], last],
            units_per_minute=units_per_minute,
            baseline=baseline,
            regressed=regressed,
            alpha=alpha,
            dispersion=dispersion,
        )

    if power(longest) < target:
        return None
    low, high = 0.0, longest
    while high - low > max(1.0, high * 1e-3):  # to the minute: it is said to the minute
        middle = (low + high) / 2
        low, high = (middle, high) if power(middle) < target else (low, middle)
    return high


def power_warnings(plan: Plan) -> list[tuple[str, str]]:
    """Compare gates whose steps are too short to see their ``detect`` regression with their
    ``power``, as (field path, message)."""
    traffic = plan.traffic
    if traffic is None:
        return []
    found = []
    for name, gate in plan.gates.items():
        if not isinstance(gate, CompareGate) or gate.detect is None:
            continue
        steps = carrying_steps(plan, name)
        if not steps:
            continue
        detect = gate.detect
        units = traffic.sessions_per_minute
        if gate.events_cluster():
            units *= traffic.requests_per_session
        stretches = [
            Stretch(plan.step_weight(i) / 100, plan.steps[i].hold_for().total_seconds() / 60)
            for i in steps
        ]
        alpha = gate.alpha * (1.0 - gate.sequential_share)
        odds = {
            "units_per_minute": units,
            "baseline": detect.baseline,
            "regressed": detect.regressed,
            "alpha": alpha,
            "dispersion": detect.dispersion,
        }
        chance = final_look_power(stretches, **odds)
        if chance >= detect.power:
            continue
        needed = minutes_needed(stretches, detect.power, **odds)
        found.append((f"gates.{name}.detect", _message(plan, gate, steps, chance, needed)))
    return found


def carrying_steps(plan: Plan, gate: str) -> list[int]:
    """The steps whose live traffic the gate's final look sums: those that carry it while
    both pools serve users (a mirrored shadow step's copies are not independent sessions)."""
    return [
        i
        for i, step in enumerate(plan.steps)
        if gate in step.gates and 0 < plan.step_weight(i) < 100
    ]


def detect_problems(plan: Plan) -> list[tuple[str, str]]:
    """A ``detect`` that no final look can answer, or that lacks the traffic to answer it."""
    problems = []
    for name, gate in plan.gates.items():
        if not isinstance(gate, CompareGate) or gate.detect is None:
            continue
        where = f"gates.{name}.detect"
        if not gate.final_look:
            problems.append((where, "needs the gate's final look (final_look: false)"))
        elif not carrying_steps(plan, name):
            problems.append(
                (where, "no step carries the gate with live traffic on both pools to look at")
            )
        elif plan.traffic is None:
            problems.append(
                (where, "needs the plan's 'traffic: {sessions_per_minute: ...}' to be checked")
            )
    return problems


def _message(
    plan: Plan, gate: CompareGate, steps: list[int], chance: float, needed: float | None
) -> str:
    traffic, detect = plan.traffic, gate.detect
    assert traffic is not None and detect is not None
    weights = " then ".join(f"{plan.step_weight(i)}%" for i in steps)
    given = sum((plan.steps[i].hold_for() for i in steps), timedelta(0))
    last = steps[-1]
    field = "bake" if plan.steps[last].kind == "canary" else "duration"
    seen = f"{gate.signal} {_pct(detect.baseline)} -> {_pct(detect.regressed)}"
    text = (
        f"at {weights} of {traffic.sessions_per_minute:g} sessions/min its steps give this "
        f"gate {format_duration(given)} to see {seen}: a {chance:.0%} chance at its final "
        f"look, under the {detect.power:.0%} asked"
    )
    if needed is None:
        text += (
            f"; even a {format_duration(LONGEST_BAKE)} {field} at steps[{last}] would not "
            "reach it: raise the weight, or detect a larger regression"
        )
    else:
        bake = timedelta(minutes=math.ceil(needed))
        text += f"; steps[{last}].{field} needs ~{_rounded(bake)} (it is "
        text += f"{format_duration(plan.steps[last].hold_for())})"
    if gate.events_cluster() and detect.dispersion == 1.0:
        text += (
            "; this assumes independent requests: where a session's requests share a fate, "
            "set detect.dispersion to the dispersion the gate's evidence reports"
        )
    return text


def _rounded(span: timedelta) -> str:
    """A duration as plans write it, rounded up: to the hour past a day (``3d5h``), to the
    minute below it (``9h20m``)."""
    minutes = math.ceil(span.total_seconds() / 60)
    if minutes >= 24 * 60:
        minutes = 60 * math.ceil(minutes / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    return "".join(f"{v}{unit}" for v, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if v)


def _pct(rate: float) -> str:
    return f"{rate * 100:.3g}%"


__all__ = [
    "LONGEST_BAKE",
    "Stretch",
    "carrying_steps",
    "detect_problems",
    "final_look_power",
    "minutes_needed",
    "power_warnings",
]
