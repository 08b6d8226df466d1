"""Every read and write of rollout data, in one import: ``from rolloutd.store import queries``.

Each function takes a :class:`~sqlalchemy.orm.Session` and, when it writes a time, an explicit
``now``: the store never reads the clock. Functions flush but never commit; the caller owns the
transaction, so a state change, its events and its actions commit together or not at all.
The functions live in one module per table family; this module gathers them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, union
from sqlalchemy.orm import Session

from rolloutd.store.actions import (
    ActionOutcome,
    action_by_key,
    bump_action_attempt,
    done_action_keys,
    done_action_keys_of,
    enqueue_actions,
    finish_action,
    open_actions_of,
    pending_actions,
    reopen_action,
    supersede_weight_attempts,
)
from rolloutd.store.artefacts import record_deploy
from rolloutd.store.commands import (
    COMMANDS_CHANNEL,
    CommandKind,
    CommandOutcome,
    add_command,
    finish_command,
    lock_submissions,
    pending_commands,
    pending_commands_of,
)
from rolloutd.store.errors import StaleWrite
from rolloutd.store.evaluations import (
    GateLatest,
    GateRole,
    latest_evaluations,
    latest_of_rollouts,
    newest_evaluations,
    recent_values,
    record_evaluation,
    record_evaluations,
)
from rolloutd.store.events import append_event, list_events
from rolloutd.store.models import Action, Rollout
from rolloutd.store.rollouts import (
    create_rollout,
    get_rollout,
    keep_light,
    list_rollouts,
    rollouts_of,
    save_progress,
)
from rolloutd.store.steps import list_steps, steps_of, upsert_step

__all__ = [
    "COMMANDS_CHANNEL",
    "ActionOutcome",
    "CommandKind",
    "CommandOutcome",
    "GateLatest",
    "GateRole",
    "StaleWrite",
    "action_by_key",
    "add_command",
    "append_event",
    "bump_action_attempt",
    "create_rollout",
    "done_action_keys",
    "done_action_keys_of",
    "ended_since",
    "enqueue_actions",
    "finish_action",
    "finish_command",
    "get_rollout",
    "keep_light",
    "latest_evaluations",
    "latest_of_rollouts",
    "list_events",
    "list_rollouts",
    "list_steps",
    "lock_submissions",
    "newest_evaluations",
    "open_actions_of",
    "pending_actions",
    "pending_commands",
    "pending_commands_of",
    "recent_values",
    "record_deploy",
    "record_evaluation",
    "record_evaluations",
    "reopen_action",
    "rollouts_of",
    "save_progress",
    "steps_of",
    "supersede_weight_attempts",
    "upsert_step",
]


def rollouts_to_drive(session: Session, *, ended_since: datetime) -> set[int]:
    """The rollouts the leader drives, in one statement: the active ones, those that still owe
    an action, and those that ended ``ended_since`` or later (their router stays verified)."""
    active = select(Rollout.id).where(Rollout.active)
    owing = select(Action.rollout_id).where(Action.status == "pending")
    recent = select(Rollout.id).where(~Rollout.active, Rollout.updated_at >= ended_since)
    return set(session.scalars(union(active, owing, recent)))


def ended_since(session: Session, since: datetime) -> list[Rollout]:
    """Rollouts no longer active whose last write (the one that ended them) is ``since`` or
    later: the ones whose router the leader still keeps verified."""
    query = select(Rollout).where(~Rollout.active, Rollout.updated_at >= since)
    return list(session.scalars(query.order_by(Rollout.id)))


def has_successor(session: Session, rollout: Rollout) -> bool:
    """Whether a newer rollout of the same service and environment exists: it owns the
    router now, and the ended ``rollout`` must stop keeping it at its final weight."""
    newer = select(Rollout.id).where(
        Rollout.service == rollout.service,
        Rollout.environment == rollout.environment,
        Rollout.id > rollout.id,
    )
    return session.scalar(newer.limit(1)) is not None
