"""Why the rollout rolled back, as the first thing its page says.

The state machine rolls back on a trigger's *fail* as on any gate's *breach*
(:mod:`rolloutd.core.machine`); a step gate's *fail* only holds the step. The pages use the
README's words for exactly that: *breach* is what rolled back (or would, on a trigger), *fail*
is a hold. So an evaluation is shown as a breach when its verdict is one, or when it failed in
a trigger's role, and the deciding gate's evaluation, its threshold, how far past it the value
was, and the evidence it rested on (samples, canary vs stable, the test's statistic) are read
once, for the panel above everything else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.redact import scrub
from rolloutd.store import page_reads

if TYPE_CHECKING:
    from rolloutd.store.types import Session

VERDICTS = ("pass", "fail", "breach", "inconclusive", "pending")
"""The words every page uses, in the legend's order."""
MEANING = {
    "pass": "pass",
    "fail": "fail (holds the step)",
    "breach": "breach (rolls back)",
    "inconclusive": "inconclusive",
    "pending": "pending",
}
THRESHOLD = re.compile(r"^\s*(?:p\d+\s*)?(<=|>=|<|>)\s*(-?[0-9.]+(?:e-?[0-9]+)?)")
"""A threshold that names a number (``<= 0.05``, ``p95 < 14s``): the line a chart draws."""


def shown_verdict(verdict: str, roles: Any) -> str:
    """The word a page shows for a stored verdict: a trigger's *fail* rolls back, so it is a
    *breach*; a step gate's *fail* holds the step and stays a *fail*."""
    if verdict == "fail" and "trigger" in (roles or ()):
        return "breach"
    return verdict


@dataclass(frozen=True)
class Decision:
    """The rollback and the evaluation it acted on."""

    at: datetime
    cause: str
    step: int | None
    step_name: str | None
    gate: str | None
    evaluated_at: datetime | None = None
    value: float | None = None
    threshold: str | None = None
    over: str | None = None
    """How far past its threshold the value was, in words: ``0.0182 over (1.36x the limit)``."""
    samples: int | None = None
    statistic: float | None = None
    canary: float | None = None
    stable: float | None = None
    interval: tuple[float, float] | None = None
    reason: str = ""


def decision_of(session: Session, rollback: Any, decider: int | None) -> Decision:
    """The panel's facts from the ``rollback_started`` event and the evaluation it acted on."""
    data = rollback.data or {}
    step = data.get("step")
    found = None if decider is None else page_reads.evaluation_by_id(session, decider)
    shown = Decision(
        at=rollback.at,
        cause=str(data.get("cause") or ""),
        step=step + 1 if isinstance(step, int) else None,
        step_name=data.get("step_name"),
        gate=data.get("gate"),
        value=_number(data.get("value")),
        threshold=data.get("threshold"),
        reason=scrub(str(getattr(rollback, "detail", "") or "")),
    )
    if found is None:
        return _with_over(shown)
    evidence = found.evidence or {}
    canary, stable = _part(evidence, "canary"), _part(evidence, "stable")
    lower, upper = _number(canary.get("lower")), _number(canary.get("upper"))
    return _with_over(
        Decision(
            at=shown.at,
            cause=shown.cause,
            step=shown.step,
            step_name=shown.step_name,
            gate=shown.gate,
            evaluated_at=found.evaluated_at,
            value=_number(found.value) if shown.value is None else shown.value,
            threshold=found.threshold or shown.threshold,
            samples=found.samples,
            statistic=_number(found.statistic),
            canary=_number(canary.get("rate", canary.get("estimate"))),
            stable=_number(stable.get("rate", stable.get("estimate"))),
            interval=None if lower is None or upper is None else (lower, upper),
            reason=scrub(found.reason or "") or shown.reason,
        )
    )


def _with_over(decision: Decision) -> Decision:
    """The decision with how far its value lay past a numeric threshold (``<= 0.05``)."""
    match = THRESHOLD.match(decision.threshold or "")
    if match is None or decision.value is None:
        return decision
    limit = float(match.group(2))
    gap = decision.value - limit if match.group(1).startswith("<") else limit - decision.value
    ratio = f" ({decision.value / limit:.2f}x the limit)" if limit else ""
    word = "over" if match.group(1).startswith("<") else "under"
    over = f"{abs(gap):.4g} {word}{ratio}" if gap > 0 else "within the threshold"
    return Decision(**{**decision.__dict__, "over": over})


def _part(evidence: dict[str, Any], pool: str) -> dict[str, Any]:
    found = evidence.get(pool)
    return found if isinstance(found, dict) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
