"""What an operator can do to rollouts, as functions over a database session.

``rolloutctl`` is a thin layer over these; tests and the demo call them directly. They
never act on the world themselves: starting a rollout writes a pending row, a promote
writes a command row, and the daemon's next tick (or a NOTIFY) does the rest.

The views that ``rolloutctl status`` and ``list`` print read with Core statements
(:mod:`rolloutd.store.reads`), on a Connection or a Session alike, and rebuild a rollout's
plan only where what they show depends on it. The other functions import the ORM queries
they use inside themselves: those two commands start without the ORM.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml
from pydantic import ValidationError

from rolloutd.core.machine import refusal, state_of
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress, State, derive_state, rollback_outcome
from rolloutd.errors import Refused
from rolloutd.planfile import LoadedPlan, parse_plan
from rolloutd.store import reads

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    from rolloutd.core.actions import CommandKind
    from rolloutd.store.models import Rollout


def start_rollout(session: Session, loaded: LoadedPlan, *, actor: str, now: datetime) -> int:
    """Create a pending rollout of ``loaded``; the daemon starts it on its next tick.

    :raises Refused: while another rollout of the same service and environment is active.
    """
    from rolloutd.store import queries

    plan = loaded.plan
    return queries.create_rollout(
        session,
        name=plan.name,
        service=plan.service,
        environment=plan.environment,
        plan_hash=loaded.content_hash,
        plan_source=loaded.text,
        plan_path=loaded.source,
        steps=len(plan.steps),
        progress=Progress().for_storage(),
        state=State.PENDING.value,
        actor=actor,
        now=now,
    )


def admission_problems(session: Session, plan: Plan, *, skip_drill: bool = False) -> list[str]:
    """Why ``plan`` may not start: artefact sets that are not pinned and, for production, no
    passed staging drill of the same (stable, canary) pair -- unless ``skip_drill``.

    Checking the sets' files against their digests takes minutes on a real model; callers
    do that outside any transaction (:func:`rolloutd.deploy.catalog.file_problems`).
    """
    from rolloutd.deploy.catalog import check_artefacts
    from rolloutd.deploy.drills import drill_gate

    problems = check_artefacts(session, plan, verify_files=False)
    if not problems and not skip_drill:
        refused = drill_gate(session, plan)
        if refused is not None:
            problems.append(refused)
    return problems


def record_skipped_drill(
    session: Session, rollout_id: int, *, reason: str, actor: str, now: datetime
) -> None:
    """Keep ``--skip-drill`` in the audit log and alert about it (the daemon sends it)."""
    detail = f"started without a passed staging drill by {actor}: {reason}"
    _record_override(session, rollout_id, "drill_skipped", "skip_drill", detail, reason, now, actor)


def record_forced_preflight(
    session: Session,
    rollout_id: int,
    *,
    reason: str,
    absent: list[str],
    actor: str,
    now: datetime,
) -> None:
    """Keep ``start --force`` over an absent first-step signal in the audit log, and alert."""
    detail = (
        f"started by {actor} although these gates cannot be judged: {'; '.join(absent)}: {reason}"
    )
    _record_override(
        session, rollout_id, "preflight_forced", "preflight_forced", detail, reason, now, actor
    )


def _record_override(
    session: Session,
    rollout_id: int,
    kind: str,
    topic: str,
    detail: str,
    reason: str,
    now: datetime,
    actor: str,
) -> None:
    """An operator's override of a start check: an event, and a warning to the team."""
    from rolloutd.store import queries

    queries.append_event(
        session,
        rollout_id=rollout_id,
        kind=kind,
        actor=actor,
        detail=detail,
        data={"reason": reason},
        now=now,
    )
    queries.enqueue_actions(
        session,
        rollout_id=rollout_id,
        actions=[
            (
                f"alert/{topic}",
                "alert",
                {
                    "topic": topic,
                    "severity": "warning",
                    "text": f"Rollout {rollout_id} {detail}",
                    "reason": reason,
                },
            )
        ],
        now=now,
    )


def submit_command(
    session: Session,
    rollout_id: int,
    kind: CommandKind,
    *,
    actor: str,
    reason: str | None,
    full: bool = False,
    now: datetime,
) -> Submitted:
    """Queue an operator command for the daemon, refusing one that makes no sense now; an
    identical command still waiting is not queued twice.

    :raises NotFound: when there is no such rollout.
    :raises Refused: with the reason, when the command does not apply in the current state.
    """
    from rolloutd.store import queries

    # Locked, so that of two identical commands sent at once one is queued (Postgres; SQLite
    # has one writer at a time anyway).
    rollout = queries.get_rollout(session, rollout_id, for_update=True)
    plan = plan_of(rollout)
    why = refusal(plan, Progress.from_storage(rollout.progress), kind, full=full)
    if why is not None:
        raise Refused(f"cannot {kind} rollout {rollout_id}: {why}")
    args: dict[str, Any] = {"full": True} if full else {}
    for waiting in queries.pending_commands(session, rollout_id):
        if waiting.kind == kind and waiting.args == args:
            # The same request again (a retried script, a second operator): one is enough.
            return Submitted(waiting.id, queued=False)
    command_id = queries.add_command(
        session,
        rollout_id=rollout_id,
        kind=kind,
        args=args,
        actor=actor,
        reason=reason,
        now=now,
    )
    detail = f"{kind}{' --full' if full else ''} requested" + (f": {reason}" if reason else "")
    queries.append_event(
        session, rollout_id=rollout_id, kind="command", actor=actor, detail=detail, now=now
    )
    return Submitted(command_id, queued=True)


class Submitted(NamedTuple):
    """The command that will act on a request: ``queued`` new, or an identical one that was
    already waiting for the leader (then nothing was written)."""

    id: int
    queued: bool


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


# Parsed plans by content hash. A plan is frozen, so every rollout started from the same plan
# shares one model, and a tick never parses YAML again; the oldest entry goes past the bound.
PLAN_CACHE_SIZE = 4096
_plans: OrderedDict[str, Plan] = OrderedDict()
_plans_lock = threading.Lock()


def plan_of(rollout: Rollout | reads.RolloutRow) -> Plan:
    """The plan a rollout was started with, parsed from the text stored with it once per
    content hash (the hash stored with the rollout)."""
    with _plans_lock:
        plan = _plans.get(rollout.plan_hash)
        if plan is not None:
            _plans.move_to_end(rollout.plan_hash)
            return plan
    plan = parse_plan(rollout.plan_source, f"the plan stored with rollout {rollout.id}").plan
    with _plans_lock:
        _plans[rollout.plan_hash] = plan
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


# libyaml parses a plan some eight times as fast as PyYAML's own parser; PyYAML's wheels ship it.
_YAML_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


def _shown_plan(rollout: Rollout | reads.RolloutRow) -> Plan:
    """The plan of ``rollout`` for a view: the one this process parsed already, if any, else
    rebuilt from the stored text. That text passed every check of :func:`plan_of` when the
    rollout started (its metric templates too, which take longer than the rest of a view to
    load), so only the model is rebuilt here."""
    with _plans_lock:
        plan = _plans.get(rollout.plan_hash)
    if plan is not None:
        return plan
    try:
        return Plan.model_validate(yaml.load(rollout.plan_source, Loader=_YAML_LOADER))
    except (yaml.YAMLError, ValidationError):
        # A plan stored by an older rolloutd that this one's model refuses: the full parse
        # says which field, as the daemon would.
        return plan_of(rollout)


def _settled_weight(state: State) -> int | None:
    """The canary weight ``state`` implies whatever the step: all of it once completed, none
    before the start and during or after a rollback (None: the current step's)."""
    if state is State.COMPLETED:
        return 100
    if state in (State.PENDING, State.ROLLING_BACK, State.ROLLED_BACK, State.ABORTED, State.FAILED):
        return 0
    return None


def current_weight(plan: Plan, progress: Progress) -> int:
    """The canary weight the rollout intends now, in percent."""
    weight = _settled_weight(state_of(plan, progress))
    return plan.step_weight(progress.step_index) if weight is None else weight


def status_view(db: Connection | Session, rollout: Rollout | reads.RolloutRow) -> dict[str, Any]:
    """The status of one rollout as ``rolloutctl status --output json`` prints it.

    ``step`` counts from 1, as every view does: ``"step": 2, "steps": 6`` is the second of six
    steps. ``rollback`` says how a rollback ended (``verified``, or ``traffic_only`` for a plan
    without an executor, with the plan's ``no_executor_reason``); null until one has.
    """
    plan = _shown_plan(rollout)
    progress = Progress.from_storage(rollout.progress)
    state = state_of(plan, progress)
    index = min(progress.step_index, len(plan.steps) - 1)
    step = plan.steps[index]
    return {
        **_head(rollout, state, progress, index),
        "step_name": step.title(),
        "step_kind": step.kind,
        "steps": len(plan.steps),
        "weight": current_weight(plan, progress),
        "baked_seconds": round(progress.baked(rollout.updated_at).total_seconds(), 3),
        "bake_seconds": step.hold_for().total_seconds(),
        "paused": progress.paused,
        "rollback_cause": progress.rollback.cause if progress.rollback else None,
        **_with_load(_gate_views(db, rollout.id, plan, index)),
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
    db: Connection | Session, rollout_id: int, plan: Plan, index: int
) -> list[dict[str, Any]]:
    step_gates = plan.gates_of(index)
    triggers = plan.rollback.triggers
    # A gate of the step that is also a trigger serves both roles with one evaluation a tick.
    roles = [(g, "step+trigger" if g in triggers else "step") for g in step_gates]
    roles += [(g, "trigger") for g in triggers if g not in step_gates]
    # A step's gate shows what it said during this step; a rollback trigger, at any step.
    wanted = [(g, None if role == "trigger" else index) for g, role in roles if g in plan.gates]
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
    of the step it ended in its row is complete without its plan: only a rollout that has
    not ended (or never started) rebuilds the plan, to tell its step and weight.
    """
    progress = Progress.from_storage(rollout.progress)
    if progress.ended is not None and step_name is not None:
        # An ending is the state whatever the step (not awaiting a promotion any more).
        state = derive_state(progress, awaiting_promotion=False)
        index, weight = progress.step_index, _settled_weight(state)
    else:
        plan = _shown_plan(rollout)
        index = min(progress.step_index, len(plan.steps) - 1)
        state, weight = state_of(plan, progress), current_weight(plan, progress)
        step_name = plan.steps[index].title()
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
    return [
        {"at": _iso(e.at), "kind": e.kind, "actor": e.actor, "detail": e.detail}
        for e in queries.list_events(session, rollout_id)
    ]


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
    view["events"] = [
        {"at": _iso(e.at), "kind": e.kind, "actor": e.actor, "detail": e.detail} for e in events
    ]
    view["ended"] = State(view["state"]).terminal
    return view
