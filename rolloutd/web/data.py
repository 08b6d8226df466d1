"""What the web view and the report show of a rollout, read from the store.

A 48 h bake stores about 200,000 evaluations; a page cannot draw them all, and must not
hide the ones that mattered. A gate with no more than ``MAX_POINTS`` evaluations is drawn
whole; a bigger one keeps what compaction keeps (:mod:`rolloutd.store.retention`): every
verdict change, the newest of each step, the newest at each decision the events record (what
the state machine judged), and then one per time slice, where a slice is the rollout's span
over ``MAX_POINTS``. The selection reads three narrow columns in the index's order and lets
the database group the slices; only the kept rows' values and evidence are read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from rolloutd.errors import NotFound
from rolloutd.operations import plan_of
from rolloutd.redact import scrub
from rolloutd.store import page_reads, queries
from rolloutd.store.evaluations import roles_of
from rolloutd.store.retention import DECISIVE_EVENTS
from rolloutd.views import history_view, status_view
from rolloutd.web import beside
from rolloutd.web.decision import THRESHOLD, Decision, decision_of, shown_verdict

if TYPE_CHECKING:
    from rolloutd.store.types import Session

MAX_POINTS = 600
ENDED = ("completed", "rolled_back", "aborted", "failed")
"""States in which a gate never evaluated will never be: its card is folded away."""
"""Evaluations drawn per gate, at most, besides the decisive ones."""


@dataclass(frozen=True)
class Point:
    """One evaluation as a chart draws it."""

    id: int
    at: datetime
    step: int
    """The step it was made in, counted from 1 as every view counts steps."""
    verdict: str
    canary: float | None
    stable: float | None = None
    lower: float | None = None
    upper: float | None = None
    reason: str = ""
    decided_rollback: bool = False


@dataclass
class GateChart:
    """One gate's evaluations over the rollout, thinned for drawing."""

    name: str
    roles: list[str]
    signal: str | None
    threshold: str | None
    limit: float | None
    stored: int
    points: list[Point]
    query: str | None = None
    prometheus_link: str | None = None
    decided: bool = False
    """Whether this gate's evaluation is the one the rollback acted on."""

    @property
    def compared(self) -> bool:
        """Whether the gate judges canary against stable (its points carry stable's value)."""
        return any(p.stable is not None for p in self.points)

    @property
    def interval(self) -> bool:
        """Whether the gate's test gave the canary an interval (drawn as a band)."""
        return any(p.lower is not None and p.upper is not None for p in self.points)

    @property
    def thinned(self) -> bool:
        """Whether some evaluations were left out of the chart."""
        return len(self.points) < self.stored


@dataclass
class RolloutPage:
    """Everything the rollout page shows."""

    status: dict[str, Any]
    events: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    weights: list[tuple[datetime, float]]
    gates: list[GateChart]
    suite_runs: list[dict[str, Any]]
    artefacts: list[dict[str, Any]]
    drills: list[dict[str, Any]]
    started: datetime
    ended: datetime
    version: str
    decision: Decision | None = None
    not_reached: list[str] = field(default_factory=list)
    """Gates of an ended rollout that were never evaluated (a later step's, say)."""
    extra: dict[str, Any] = field(default_factory=dict)


def version(session: Session, rollout_id: int) -> str:
    """A token that changes whenever something the rollout page shows changes.

    :raises NotFound: no rollout ``rollout_id``.
    """
    revision, newest_evaluation, newest_event = page_reads.page_version(session, rollout_id)
    if revision is None:
        raise NotFound(f"no rollout {rollout_id}")
    return f"{revision}-{newest_evaluation}-{newest_event}"


def list_version(session: Session) -> str:
    """A token that changes whenever a rollout is created or written."""
    count, newest = page_reads.rollouts_version(session)
    return f"{count}-{newest.isoformat() if newest else ''}"


def rollout_page(session: Session, rollout_id: int, *, now: datetime) -> RolloutPage:
    """The rollout page's data.

    :raises NotFound: no rollout ``rollout_id``.
    """
    rollout = queries.get_rollout(session, rollout_id)
    plan = plan_of(rollout)
    status = status_view(session, rollout)
    events = history_view(session, rollout_id)
    steps = [
        {
            "step": s.step_index + 1,
            "name": s.name,
            "kind": s.kind,
            "weight": s.weight,
            "entered_at": s.entered_at,
            "verified_at": s.verified_at,
            "completed_at": s.completed_at,
        }
        for s in queries.list_steps(session, rollout_id)
    ]
    stored = _stored(session, rollout_id)
    decisions = page_reads.events_of_kinds(session, rollout_id, DECISIVE_EVENTS)
    started = min([rollout.created_at, *(g.first for g in stored.values())])
    ended = max([rollout.updated_at, *(g.last for g in stored.values())])
    if status["state"] in ("running", "pending", "paused", "awaiting_promotion"):
        ended = max(ended, now)
    gates = _charts(session, plan, stored, decisions, started, ended)
    decision = _decision(session, decisions, gates)
    # The deciding gate's card comes first; on an ended rollout, gates never reached fold away.
    gates.sort(key=lambda g: not g.decided)
    not_reached: list[str] = []
    if status["state"] in ENDED:
        not_reached = [g.name for g in gates if g.stored == 0]
        gates = [g for g in gates if g.stored]
    pinned = beside.artefacts(session, [plan.artefacts.stable, plan.artefacts.canary])
    return RolloutPage(
        status=status,
        events=events,
        steps=steps,
        weights=_weights(steps, events),
        gates=gates,
        suite_runs=beside.suite_runs(session, rollout_id),
        artefacts=[{k: v for k, v in a.items() if k != "full_digest"} for a in pinned],
        drills=beside.drills(session, pinned, rollout.created_at),
        started=started,
        ended=ended,
        version=version(session, rollout_id),
        decision=decision,
        not_reached=not_reached,
    )


def _decision(session: Session, decisions: list[Any], gates: list[GateChart]) -> Decision | None:
    """The rollback's decision, when the rollout rolled back (the first rollback counts)."""
    rollback = next((d for d in decisions if d.kind == "rollback_started"), None)
    if rollback is None:
        return None
    decider = next((p.id for g in gates for p in g.points if p.decided_rollback), None)
    return decision_of(session, rollback, decider)


def _charts(
    session: Session,
    plan: Any,
    stored: dict[str, Stored],
    decisions: list[Any],
    started: datetime,
    ended: datetime,
) -> list[GateChart]:
    rollback = next((d for d in decisions if d.kind == "rollback_started"), None)
    slice_seconds = max(1.0, (ended - started).total_seconds() / MAX_POINTS)
    charts = []
    for name in [*plan.gates, *(g for g in stored if g not in plan.gates)]:
        found = stored.get(name)
        keep: set[int] = set()
        decider = None
        if found is not None:
            keep = _thinned(session, found, decisions, started, slice_seconds)
            if rollback is not None and (rollback.data or {}).get("gate") == name:
                decider = page_reads.newest_evaluation_until(
                    session, found.rollout_id, name, rollback.at
                )
        points = _points(session, keep, decider)
        threshold, query = (
            (None, None)
            if found is None
            else page_reads.threshold_and_query(session, found.newest_id)
        )
        link = _prometheus_link(query, plan)
        charts.append(
            GateChart(
                name=name,
                roles=sorted(found.roles) if found else [],
                signal=getattr(plan.gates.get(name), "signal", None),
                threshold=threshold,
                limit=_limit(threshold),
                stored=found.count if found else 0,
                points=points,
                query=query,
                prometheus_link=link,
                decided=decider is not None,
            )
        )
    return charts


@dataclass
class Stored:
    """What the store holds of one gate's evaluations in a rollout."""

    rollout_id: int
    gate: str
    count: int
    first: datetime
    last: datetime
    newest_id: int
    roles: set[str]


def _stored(session: Session, rollout_id: int) -> dict[str, Stored]:
    """Each gate's evaluations in one aggregate: how many, over what time, in which roles."""
    found: dict[str, Stored] = {}
    for gate, role, count, first, last, newest in page_reads.evaluation_spans(session, rollout_id):
        seen = found.get(gate)
        if seen is None:
            found[gate] = Stored(rollout_id, gate, count, first, last, newest, set(roles_of(role)))
            continue
        seen.count += count
        seen.roles.update(roles_of(role))
        seen.first, seen.last = min(seen.first, first), max(seen.last, last)
        seen.newest_id = max(seen.newest_id, newest)
    return found


def _thinned(
    session: Session,
    gate: Stored,
    decisions: list[Any],
    started: datetime,
    slice_seconds: float,
) -> set[int]:
    """The ids of the gate's evaluations that the chart draws: all of them up to
    ``MAX_POINTS``; beyond, every verdict change and the newest of each step (one pass over
    three narrow columns, in the index's order), the newest at every decision (an index
    seek each), and one per slice of the rollout's span (one grouped query)."""
    in_order = page_reads.evaluation_verdicts(session, gate.rollout_id, gate.gate)
    if gate.count <= MAX_POINTS:
        return {id_ for id_, _, _ in in_order}
    keep: set[int] = set()
    previous: tuple[int, str] | None = None
    last_id = 0
    for id_, step, verdict in in_order:
        if previous is None or previous[0] != step:
            if previous is not None:
                keep.add(last_id)  # the newest of the step before
            keep.add(id_)
        elif previous[1] != verdict:
            keep.add(id_)
        previous, last_id = (step, verdict), id_
    keep.add(last_id)
    for decision in decisions:
        newest = page_reads.newest_evaluation_until(
            session, gate.rollout_id, gate.gate, decision.at
        )
        if newest is not None:
            keep.add(newest)
    keep.update(
        page_reads.newest_per_slice(session, gate.rollout_id, gate.gate, started, slice_seconds)
    )
    return keep


def _points(session: Session, ids: set[int], decider: int | None) -> list[Point]:
    if not ids:
        return []
    found = page_reads.evaluation_points(session, sorted(ids))
    found.sort(key=lambda row: (row.evaluated_at, row.id))
    points = []
    for row in found:
        evidence = row.evidence or {}
        canary = evidence.get("canary")
        canary_bounds: dict[str, Any] = canary if isinstance(canary, dict) else {}
        points.append(
            Point(
                id=row.id,
                at=row.evaluated_at,
                step=row.step_index + 1,
                verdict=shown_verdict(row.verdict, roles_of(row.role)),
                canary=_number(row.value),
                stable=stable_value(evidence),
                lower=_number(canary_bounds.get("lower")),
                upper=_number(canary_bounds.get("upper")),
                reason=scrub(row.reason or ""),
                decided_rollback=row.id == decider,
            )
        )
    return points


def _limit(threshold: str | None) -> float | None:
    """The number a threshold such as ``<= 0.01`` draws as a line, if it names one."""
    match = THRESHOLD.match(threshold or "")
    if match is None:
        return None
    value = float(match.group(2))
    return value if math.isfinite(value) else None


def _prometheus_link(query: str | None, plan: Any) -> str | None:
    """A link to the gate's newest query in Prometheus' graph page when the plan's source is
    Prometheus (without any credentials in the URL)."""
    url = getattr(plan.metrics, "url", None)
    if not query or plan.metrics.source != "prometheus" or not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    base = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
    return f"{base}/graph?g0.expr={quote(query)}&g0.tab=0"


def _weights(
    steps: list[dict[str, Any]], events: list[dict[str, Any]]
) -> list[tuple[datetime, float]]:
    """The canary weight the router served over time: each step's weight from when the
    router was verified at it (or entered it), and 0 from the rollback on."""
    found: list[tuple[datetime, float]] = []
    for step in steps:
        at = step["verified_at"] or step["entered_at"]
        if at is not None:
            found.append((at, float(step["weight"])))
    for event in events:
        if event["kind"] in ("rollback_started", "rolled_back", "aborted"):
            found.append((datetime.fromisoformat(event["at"]), 0.0))
    return sorted(found)


def stable_value(evidence: dict[str, Any]) -> float | None:
    """Stable's value in an evaluation's evidence: the rate a count comparison measured, or
    the quantile estimate a latency comparison made; None where the gate does not compare."""
    rate = _number(_dig(evidence, "stable", "rate"))
    return rate if rate is not None else _number(_dig(evidence, "stable", "estimate"))


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
