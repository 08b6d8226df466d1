"""What an operator can do to rollouts, as functions over a database session.

``rolloutctl`` is a thin layer over these; tests and the demo call them directly. They
never act on the world themselves: starting a rollout writes a pending row, a promote
writes a command row, and the daemon's next tick (or a NOTIFY) does the rest.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from rolloutd.core.actions import CommandKind
from rolloutd.core.machine import refusal, state_of
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Progress, State
from rolloutd.errors import Refused
from rolloutd.planfile import LoadedPlan, parse_plan
from rolloutd.store import queries
from rolloutd.store.models import Rollout


def start_rollout(session: Session, loaded: LoadedPlan, *, actor: str, now: datetime) -> int:
    """Create a pending rollout of ``loaded``; the daemon starts it on its next tick.

    :raises Refused: while another rollout of the same service and environment is active.
    """
    plan = loaded.plan
    return queries.create_rollout(
        session,
        name=plan.name,
        service=plan.service,
        environment=plan.environment,
        plan_hash=loaded.content_hash,
        plan_source=loaded.text,
        plan_path=loaded.source,
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
) -> int:
    """Queue an operator command for the daemon, refusing one that makes no sense now.

    :raises NotFound: when there is no such rollout.
    :raises Refused: with the reason, when the command does not apply in the current state.
    """
    rollout = queries.get_rollout(session, rollout_id)
    plan = plan_of(rollout)
    why = refusal(plan, Progress.from_storage(rollout.progress), kind, full=full)
    if why is not None:
        raise Refused(f"cannot {kind} rollout {rollout_id}: {why}")
    args: dict[str, Any] = {"full": True} if full else {}
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
    return command_id


# Parsed plans by content hash. A plan is frozen, so every rollout started from the same plan
# shares one model, and a tick never parses YAML again; the oldest entry goes past the bound.
PLAN_CACHE_SIZE = 4096
_plans: OrderedDict[str, Plan] = OrderedDict()
_plans_lock = threading.Lock()


def plan_of(rollout: Rollout) -> Plan:
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


def current_weight(plan: Plan, progress: Progress) -> int:
    """The canary weight the rollout intends now, in percent."""
    state = state_of(plan, progress)
    if state is State.COMPLETED:
        return 100
    if state in (State.PENDING, State.ROLLING_BACK, State.ROLLED_BACK, State.ABORTED, State.FAILED):
        return 0
    return plan.step_weight(progress.step_index)


def status_view(session: Session, rollout: Rollout) -> dict[str, Any]:
    """The status of one rollout as ``rolloutctl status --output json`` prints it."""
    plan = plan_of(rollout)
    progress = Progress.from_storage(rollout.progress)
    state = state_of(plan, progress)
    index = min(progress.step_index, len(plan.steps) - 1)
    step = plan.steps[index]
    return {
        "id": rollout.id,
        "name": rollout.name,
        "service": rollout.service,
        "environment": rollout.environment,
        "state": state.value,
        "step": index,
        "step_name": step.title(),
        "step_kind": step.kind,
        "steps": len(plan.steps),
        "weight": current_weight(plan, progress),
        "baked_seconds": round(progress.baked(rollout.updated_at).total_seconds(), 3),
        "bake_seconds": step.hold_for().total_seconds(),
        "paused": progress.paused,
        "rollback_cause": progress.rollback.cause if progress.rollback else None,
        **_with_load(_gate_views(session, rollout, plan, index)),
        "plan_hash": rollout.plan_hash,
        "created_by": rollout.created_by,
        "created_at": _iso(rollout.created_at),
        "updated_at": _iso(rollout.updated_at),
    }


def _gate_views(session: Session, rollout: Rollout, plan: Plan, index: int) -> list[dict[str, Any]]:
    gates = list(plan.gates)
    step_latest = queries.latest_evaluations(session, rollout.id, step_index=index, gates=gates)
    any_latest = queries.latest_evaluations(session, rollout.id, gates=gates)
    views = []
    roles = [(g, "step") for g in plan.gates_of(index)]
    roles += [(g, "trigger") for g in plan.rollback.triggers if g not in plan.gates_of(index)]
    for gate, role in roles:
        evaluation = (step_latest if role == "step" else any_latest).get(gate)
        views.append(
            {
                "name": gate,
                "role": role,
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


def list_view(rollout: Rollout) -> dict[str, Any]:
    """One row of ``rolloutctl list``."""
    plan = plan_of(rollout)
    progress = Progress.from_storage(rollout.progress)
    index = min(progress.step_index, len(plan.steps) - 1)
    return {
        "id": rollout.id,
        "name": rollout.name,
        "service": rollout.service,
        "environment": rollout.environment,
        "state": state_of(plan, progress).value,
        "step": index,
        "step_name": plan.steps[index].title(),
        "weight": current_weight(plan, progress),
        "created_by": rollout.created_by,
        "updated_at": _iso(rollout.updated_at),
    }


def history_view(session: Session, rollout_id: int) -> list[dict[str, Any]]:
    """The audit log of one rollout, oldest first."""
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
