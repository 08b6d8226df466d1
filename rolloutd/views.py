"""What the views of rollouts show: ``rolloutctl status``, ``list``, ``history``, the web view.

They read with Core statements (:mod:`rolloutd.store.reads`), on a Connection or a Session
alike, and show a rollout's steps and gates from the outline stored with it
(:mod:`rolloutd.core.outline`), never from its plan model: ``rolloutctl status`` and ``list``
start without the ORM, pydantic or a YAML parser. Only a rollout stored before outlines were
has its outline derived from its plan, once per process and content hash.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.core.actors import acting
from rolloutd.core.outline import PlanOutline, settled_weight
from rolloutd.core.progress import Progress, State, derive_state, rollback_outcome
from rolloutd.store import reads

if TYPE_CHECKING:
    from rolloutd.store.models import Event, Rollout
    from rolloutd.store.types import Connection, Session


_derived: dict[str, PlanOutline] = {}
_derived_lock = threading.Lock()
DERIVED_KEPT = 256
"""Outlines derived for rollouts stored without one, kept at most (the oldest go first)."""


def outline_of(rollout: Rollout | reads.RolloutRow) -> PlanOutline:
    """What the views show of ``rollout``'s plan: the outline stored with it, or for a rollout
    stored before outlines were, one derived from its stored plan (kept per content hash, for
    the newest :data:`DERIVED_KEPT` hashes)."""
    stored = PlanOutline.from_json(rollout.plan_outline)
    if stored is not None:
        return stored
    with _derived_lock:
        derived = _derived.get(rollout.plan_hash)
    if derived is None:
        from rolloutd.operations import shown_plan  # the plan model: only for such rollouts

        derived = shown_plan(rollout).outline()
        with _derived_lock:
            _derived[rollout.plan_hash] = derived
            while len(_derived) > DERIVED_KEPT:
                del _derived[next(iter(_derived))]
    return derived


def leader_view(db: Connection | Session, *, now: datetime) -> dict[str, Any]:
    """Whether a rolloutd drives the rollouts at ``now``: the lease's holder, and when it was
    last renewed (the holder's clock)."""
    lease = reads.leadership(db)
    return {
        "leading": lease.leading_at(now),
        "holder": lease.holder,
        "last_seen": _iso(lease.renewed_at),
    }


def not_leading(leader: dict[str, Any]) -> str | None:
    """What an operator must know when nothing drives the rollouts (None while one does)."""
    if leader["leading"]:
        return None
    if leader["holder"] is None:
        return "no rolloutd is leading (none has run on this database)"
    seen = datetime.fromisoformat(leader["last_seen"]).strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"no rolloutd is leading (last seen {seen}, {leader['holder']})"


def current_state(rollout: Rollout | reads.RolloutRow) -> State:
    """The rollout's state as every view shows it, from its stored outline and progress alone
    (no gate is read)."""
    return outline_of(rollout).state(Progress.from_storage(rollout.progress))


def status_view(db: Connection | Session, rollout: Rollout | reads.RolloutRow) -> dict[str, Any]:
    """The status of one rollout as ``rolloutctl status --output json`` prints it.

    ``step`` counts from 1, as every view does: ``"step": 2, "steps": 6`` is the second of six
    steps. ``rollback`` says how a rollback ended (``verified``, or ``traffic_only`` for a plan
    without an executor, with the plan's ``no_executor_reason``); null until one has.
    """
    outline = outline_of(rollout)
    progress = Progress.from_storage(rollout.progress)
    state = outline.state(progress)
    index, step = outline.step(progress)
    return {
        **_head(rollout, state, progress, index),
        "step_name": step.title,
        "step_kind": step.kind,
        "steps": len(outline.steps),
        "weight": outline.weight(progress),
        "baked_seconds": round(progress.baked(rollout.updated_at).total_seconds(), 3),
        "bake_seconds": step.hold_seconds,
        "paused": progress.paused,
        "rollback_cause": progress.rollback.cause if progress.rollback else None,
        **_with_load(_gate_views(db, rollout.id, outline, index)),
        "plan_hash": rollout.plan_hash,
        "created_by": rollout.created_by,
        "created_at": _iso(rollout.created_at),
        "updated_at": _iso(rollout.updated_at),
    }


def _head(
    rollout: Rollout | reads.RolloutRow, state: State, progress: Progress, index: int
) -> dict[str, Any]:
    """What a status and a list row both begin with: which rollout, its state, its step."""
    return {
        "id": rollout.id,
        "name": rollout.name,
        "service": rollout.service,
        "environment": rollout.environment,
        "state": state.value,
        **_rollback_outcome(progress),
        "step": index + 1,
    }


def _rollback_outcome(progress: Progress) -> dict[str, Any]:
    """How the rollback ended, for a view: ``rollback`` (null until it ended rolled back)
    and, for a traffic-only one, why the plan has no executor."""
    outcome = rollback_outcome(progress)
    reason = progress.rollback.no_executor_reason if progress.rollback else None
    return {
        "rollback": outcome,
        "no_executor_reason": reason if outcome == "traffic_only" else None,
    }


def _gate_views(
    db: Connection | Session, rollout_id: int, outline: PlanOutline, index: int
) -> list[dict[str, Any]]:
    step_gates = outline.steps[index].gates
    triggers = outline.triggers
    # A gate of the step that is also a trigger serves both roles with one evaluation a tick.
    roles = [(g, "step+trigger" if g in triggers else "step") for g in step_gates]
    roles += [(g, "trigger") for g in triggers if g not in step_gates]
    # A step's gate shows what it said during this step; a rollback trigger, at any step.
    wanted = [(g, None if role == "trigger" else index) for g, role in roles if g in outline.gates]
    newest = reads.newest_evaluations(db, rollout_id, wanted)
    views = []
    for gate, role in roles:
        evaluation = newest.get(gate)
        views.append(
            {
                "name": gate,
                "role": role,
                "roles": role.split("+"),
                "verdict": evaluation.verdict if evaluation else "pending",
                "value": evaluation.value if evaluation else None,
                "threshold": evaluation.threshold if evaluation else None,
                "reason": evaluation.reason if evaluation else None,
                "evaluated_at": _iso(evaluation.evaluated_at) if evaluation else None,
                "load": (evaluation.evidence or {}).get("load") if evaluation else None,
                "resolution": (
                    (evaluation.evidence or {}).get("resolution") if evaluation else None
                ),
            }
        )
    return views


def _with_load(gates: list[dict[str, Any]]) -> dict[str, Any]:
    """The gates, each with the load ratio it was judged at, and the newest load measured
    for any of them (canary vs stable per replica) as the rollout's ``load``."""
    measured = [g for g in gates if isinstance(g["load"], dict)]
    newest = max(measured, key=lambda g: g["evaluated_at"] or "", default=None)
    load = None
    if newest is not None:
        load = {**newest["load"], "gate": newest["name"], "evaluated_at": newest["evaluated_at"]}
    for gate in gates:
        found = gate.pop("load")
        gate["load_ratio"] = found.get("ratio") if isinstance(found, dict) else None
    return {"gates": gates, "load": load}


def list_views(db: Connection | Session, *, limit: int) -> list[dict[str, Any]]:
    """The rows of ``rolloutctl list``: up to ``limit`` rollouts, newest first, read in two
    statements however many there are."""
    rollouts = reads.list_rollouts(db, limit=limit)
    names = reads.step_names(db, [r.id for r in rollouts])
    views = []
    for rollout in rollouts:
        step_index = Progress.from_storage(rollout.progress).step_index
        views.append(list_view(rollout, names.get((rollout.id, step_index))))
    return views


def list_view(rollout: Rollout | reads.RolloutRow, step_name: str | None = None) -> dict[str, Any]:
    """One row of ``rolloutctl list``; ``step_name``: the name the daemon recorded for the
    step the rollout is in, if it did. ``step`` counts from 1, of ``steps``, as in status.

    An ended rollout's state and weight follow from its progress alone, and with the name
    of the step it ended in its row is complete without its outline: only a rollout that has
    not ended (or never started) reads its outline (:func:`outline_of`), to tell its step and
    weight.
    """
    progress = Progress.from_storage(rollout.progress)
    if progress.ended is not None and step_name is not None:
        # An ending is the state whatever the step (not awaiting a promotion any more).
        state = derive_state(progress, awaiting_promotion=False)
        index, weight = progress.step_index, settled_weight(state)
    else:
        outline = outline_of(rollout)
        index, step = outline.step(progress)
        state, weight, step_name = outline.state(progress), outline.weight(progress), step.title
    return {
        **_head(rollout, state, progress, index),
        "steps": rollout.steps,
        "step_name": step_name,
        "weight": weight,
        "created_by": rollout.created_by,
        "updated_at": _iso(rollout.updated_at),
    }


def history_view(session: Session, rollout_id: int) -> list[dict[str, Any]]:
    """The audit log of one rollout, oldest first."""
    from rolloutd.store import queries

    queries.get_rollout(session, rollout_id)
    return [_event_view(e) for e in queries.list_events(session, rollout_id)]


def _event_view(event: Event) -> dict[str, Any]:
    # The actor stored is the name the operator claimed; a command's event also holds the
    # database role that submitted it, and the log shows both where they differ.
    role = (event.data or {}).get("db_role")
    actor = acting(event.actor, role) if role else event.actor
    return {"at": _iso(event.at), "kind": event.kind, "actor": actor, "detail": event.detail}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


TREND_POINTS = 20
WATCH_EVENTS = 8


def watch_view(session: Session, rollout: Rollout) -> dict[str, Any]:
    """What ``rolloutctl status --watch`` shows: the status, each gate's recent values, and
    the newest events (oldest first), plus whether the rollout has ended."""
    from rolloutd.store import queries

    view = status_view(session, rollout)
    for gate in view["gates"]:
        newest_first = queries.recent_values(session, rollout.id, gate["name"], TREND_POINTS)
        gate["trend"] = list(reversed(newest_first))
    events = queries.list_events(session, rollout.id)[-WATCH_EVENTS:]
    view["events"] = [_event_view(e) for e in events]
    view["ended"] = State(view["state"]).terminal
    return view
