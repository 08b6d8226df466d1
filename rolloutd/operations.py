"""What an operator can do to rollouts, as functions over a database session.

``rolloutctl`` is a thin layer over these; tests and the demo call them directly. They
never act on the world themselves: starting a rollout writes a pending row, a promote
writes a command row, and the daemon's next tick (or a NOTIFY) does the rest.

What the views show lives in :mod:`rolloutd.views`. These functions import the ORM queries
they use inside themselves.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml
from pydantic import ValidationError

from rolloutd.core.machine import refusal
from rolloutd.core.plan import Plan
from rolloutd.core.plan.base import Sections, share_sections
from rolloutd.core.progress import Progress, State
from rolloutd.errors import Refused
from rolloutd.planfile import LoadedPlan, parse_plan
from rolloutd.store import reads

if TYPE_CHECKING:
    from rolloutd.core.actions import CommandKind
    from rolloutd.store.models import Rollout
    from rolloutd.store.types import Session


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
        plan_outline=plan.outline().as_json(),
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
) -> str:
    """Keep ``--skip-drill`` in the audit log; returns what the alert about it says."""
    detail = f"started without a passed staging drill by {actor}: {reason}"
    _record_override(session, rollout_id, "drill_skipped", detail, reason, now, actor)
    return detail


def record_forced_preflight(
    session: Session,
    rollout_id: int,
    *,
    reason: str,
    absent: list[str],
    actor: str,
    now: datetime,
) -> str:
    """Keep ``start --force`` over an absent first-step signal in the audit log; returns what
    the alert about it says."""
    detail = (
        f"started by {actor} although these gates cannot be judged: {'; '.join(absent)}: {reason}"
    )
    _record_override(session, rollout_id, "preflight_forced", detail, reason, now, actor)
    return detail


def _record_override(
    session: Session,
    rollout_id: int,
    kind: str,
    detail: str,
    reason: str,
    now: datetime,
    actor: str,
) -> None:
    """An operator's override of a start check, as an event. The warning to the team goes
    straight to the alert outbox (:func:`rolloutd.alerts.enqueue.enqueue_rollout_alert`), not
    through the leader's intent log: the operator's role may not add actions, which the
    leader performs (deploys among them)."""
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
    queries.lock_submissions(session, rollout_id)
    rollout = queries.get_rollout(session, rollout_id)
    plan = plan_of(rollout)
    why = refusal(plan, Progress.from_storage(rollout.progress), kind, full=full)
    if why is not None:
        raise Refused(f"cannot {kind} rollout {rollout_id}: {why}")
    args: dict[str, Any] = {"full": True} if full else {}
    for waiting in queries.pending_commands(session, rollout_id):
        if waiting.kind == kind and waiting.args == args:
            # The same request again (a retried script, a second operator): one is enough.
            return Submitted(waiting.id, queued=False)
    queued = queries.add_command(
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
        session,
        rollout_id=rollout_id,
        kind="command",
        actor=actor,
        detail=detail,
        data={"command": queued.id, "claimed": actor, "db_role": queued.db_role},
        now=now,
    )
    return Submitted(queued.id, queued=True)


class Submitted(NamedTuple):
    """The command that will act on a request: ``queued`` new, or an identical one that was
    already waiting for the leader (then nothing was written)."""

    id: int
    queued: bool


# Parsed plans by content hash. A plan is frozen, so every rollout started from the same plan
# shares one model, and a tick never parses YAML again; the oldest entry goes past the bound.
PLAN_CACHE_SIZE = 4096
_plans: OrderedDict[str, Plan] = OrderedDict()
# Sections equal between plans (gates, steps, pools ...), one instance each: 10,000 rollouts
# of copies of one plan keep one set of its gates, not 10,000.
_sections: Sections = weakref.WeakValueDictionary()
_plans_lock = threading.Lock()


def plan_of(rollout: Rollout | reads.RolloutRow) -> Plan:
    """The plan a rollout was started with, parsed from the text stored with it once per
    content hash (the hash stored with the rollout)."""
    with _plans_lock:
        plan = _plans.get(rollout.plan_hash)
        if plan is not None:
            _plans.move_to_end(rollout.plan_hash)
            return plan
    source = f"the plan stored with rollout {rollout.id}"
    plan = parse_plan(rollout.plan_source, source, beside=False).plan
    with _plans_lock:
        plan = share_sections(plan, _sections)
        _plans[rollout.plan_hash] = plan
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


# libyaml parses a plan some eight times as fast as PyYAML's own parser; PyYAML's wheels ship it.
_YAML_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


def shown_plan(rollout: Rollout | reads.RolloutRow) -> Plan:
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
