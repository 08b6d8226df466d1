"""Retention: the evaluations of long-ended rollouts, compacted to the ones that mattered.

A 48 h bake at a 5 s trigger interval with 6 gates stores about 200,000 evaluation rows; the
database must not grow with every rollout ever run. Once a rollout ended more than the
retention period ago (``ROLLOUTD_RETENTION``, 90 days by default), its evaluations are
compacted to:

- the *decisive* ones: the first of each gate in each step and every one whose verdict differs
  from the gate's previous one in that step, and, at every decision the rollout's events record
  (a rollback, a pause, a promotion, a step completed or extended, the end), the newest
  evaluation of each gate at that moment, which is what the state machine judged;
- the newest of each gate in each step (what ``status`` shows);
- one per gate per hour (the newest of the hour), so a chart of the bake keeps its shape.

Compaction only deletes, never rewrites, so it can run again and again: the rows it keeps are
kept by the same rules the next time. Events (``history``) are never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from rolloutd.store.models import Event, GateEvaluation, Rollout

# The events that record a decision the gates' verdicts led to.
DECISIVE_EVENTS = frozenset(
    {
        "rollback_started",
        "paused",
        "promoted",
        "step_completed",
        "step_extended",
        "completed",
        "failed",
    }
)
DELETE_BATCH = 1000


@dataclass(frozen=True)
class Compaction:
    """What compacting one rollout's evaluations did (or would do, on a dry run)."""

    rollout_id: int
    kept: int
    deleted: int


@dataclass(frozen=True)
class Row:
    """The columns of an evaluation that decide whether it is kept."""

    id: int
    gate: str
    step_index: int
    verdict: str
    evaluated_at: datetime


def ended_before(session: Session, cutoff: datetime) -> list[int]:
    """The rollouts that ended (are no longer active) and were last written before
    ``cutoff``, oldest first."""
    query = (
        select(Rollout.id)
        .where(Rollout.active.is_(False), Rollout.updated_at < cutoff)
        .order_by(Rollout.id)
    )
    return list(session.scalars(query))


def compact(session: Session, rollout_id: int, *, dry_run: bool = False) -> Compaction:
    """Delete the evaluations of ``rollout_id`` that :func:`kept` does not keep."""
    rows = [
        Row(*found)
        for found in session.execute(
            select(
                GateEvaluation.id,
                GateEvaluation.gate,
                GateEvaluation.step_index,
                GateEvaluation.verdict,
                GateEvaluation.evaluated_at,
            )
            .where(GateEvaluation.rollout_id == rollout_id)
            .order_by(GateEvaluation.evaluated_at, GateEvaluation.id)
        )
    ]
    decisions = session.scalars(
        select(Event.at)
        .where(Event.rollout_id == rollout_id, Event.kind.in_(DECISIVE_EVENTS))
        .order_by(Event.at)
    )
    keep = kept(rows, list(decisions))
    doomed = [row.id for row in rows if row.id not in keep]
    if not dry_run:
        for start in range(0, len(doomed), DELETE_BATCH):
            batch = doomed[start : start + DELETE_BATCH]
            session.execute(delete(GateEvaluation).where(GateEvaluation.id.in_(batch)))
    return Compaction(rollout_id, len(keep), len(doomed))


def kept(rows: Sequence[Row], decisions: Iterable[datetime]) -> set[int]:
    """The ids of ``rows`` (oldest first) that compaction keeps; ``decisions`` are the times
    of the rollout's decisive events, oldest first."""
    keep: set[int] = set()
    previous: dict[tuple[str, int], str] = {}
    newest_in_step: dict[tuple[str, int], int] = {}
    newest_in_hour: dict[tuple[str, datetime], int] = {}
    newest: dict[str, Row] = {}
    pending = iter(decisions)
    decision = next(pending, None)
    for row in rows:
        while decision is not None and row.evaluated_at > decision:
            keep.update(r.id for r in newest.values())
            decision = next(pending, None)
        step = (row.gate, row.step_index)
        if previous.get(step) != row.verdict:
            keep.add(row.id)
        previous[step] = row.verdict
        newest_in_step[step] = row.id
        hour = row.evaluated_at.replace(minute=0, second=0, microsecond=0)
        newest_in_hour[(row.gate, hour)] = row.id
        newest[row.gate] = row
    if decision is not None:
        keep.update(r.id for r in newest.values())
    keep.update(newest_in_step.values())
    keep.update(newest_in_hour.values())
    return keep


def compact_ended(
    transact: Callable[[], AbstractContextManager[Session]],
    cutoff: datetime,
    *,
    dry_run: bool = False,
    progress: Callable[[Compaction], None] | None = None,
) -> list[Compaction]:
    """Compact every rollout that ended before ``cutoff``, one transaction each (from
    ``transact``), so a long run holds no lock for long and an interrupted one keeps what it
    did. Rollouts with nothing to delete are not reported."""
    with transact() as session:
        rollouts = ended_before(session, cutoff)
    done = []
    for rollout_id in rollouts:
        with transact() as session:
            compaction = compact(session, rollout_id, dry_run=dry_run)
        if compaction.deleted:
            done.append(compaction)
            if progress is not None:
                progress(compaction)
    return done
