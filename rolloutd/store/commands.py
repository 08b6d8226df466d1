"""Operator commands: ``rolloutctl`` writes them, the leader applies or rejects them.

``rolloutctl`` never talks to the daemon. It writes a pending command row and, on Postgres,
sends a NOTIFY on :data:`COMMANDS_CHANNEL` in the same transaction, delivered only if the command
commits, so the leader wakes at once. On SQLite the leader finds the command at its next tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, Literal, NamedTuple, TypedDict, Unpack

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound, Refused
from rolloutd.store.models import Command, Rollout
from rolloutd.store.writes import add_row

COMMANDS_CHANNEL: Final = "rolloutd_commands"
SUBMIT_LOCK_CLASS: Final = 0x524F4C4C
"""The first key of the advisory locks :func:`lock_submissions` takes ("ROLL")."""

CommandKind = Literal["promote", "abort", "pause", "resume"]
CommandOutcome = Literal["applied", "rejected"]


class NewCommand(TypedDict):
    """What an operator asks of which rollout; the store adds the time and the status."""

    rollout_id: int
    kind: CommandKind
    args: dict[str, Any]
    actor: str
    reason: str | None


def lock_submissions(session: Session, rollout_id: int) -> None:
    """Hold the submitters of commands to ``rollout_id`` one at a time until the transaction
    ends, so that of two identical commands sent at once one is queued.

    An advisory lock, not ``SELECT ... FOR UPDATE`` on the rollout: that needs UPDATE on
    ``rollouts``, which the operator role must not have. SQLite has one writer at a time.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(SUBMIT_LOCK_CLASS, rollout_id)))


def add_command(session: Session, *, now: datetime, **command: Unpack[NewCommand]) -> QueuedCommand:
    """Queue a command for the leader; the NOTIFY payload is the rollout id.

    :returns: its id, and the database role the database recorded as inserting it (None on
        SQLite).
    :raises NotFound: when there is no such rollout.
    """
    rollout_id = command["rollout_id"]
    if session.get(Rollout, rollout_id) is None:
        raise NotFound(f"no rollout {rollout_id}")
    row = add_row(session, Command(**command, created_at=now, status="pending"))
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_notify(COMMANDS_CHANNEL, str(rollout_id))))
    return QueuedCommand(row.id, row.db_role)


class QueuedCommand(NamedTuple):
    """A command row just written: its id and the role the database says inserted it."""

    id: int
    db_role: str | None


def pending_commands(session: Session, rollout_id: int) -> list[Command]:
    """Return the rollout's commands not yet handled, oldest first."""
    return list(
        session.scalars(
            select(Command)
            .where(Command.rollout_id == rollout_id, Command.status == "pending")
            .order_by(Command.created_at, Command.id)
        )
    )


def pending_commands_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, list[Command]]:
    """The commands not yet handled of each of ``rollout_ids`` (absent: none), oldest first,
    in one statement."""
    found: dict[int, list[Command]] = {}
    if not rollout_ids:
        return found
    rows = session.scalars(
        select(Command)
        .where(Command.rollout_id.in_(rollout_ids), Command.status == "pending")
        .order_by(Command.created_at, Command.id)
    )
    for row in rows:
        found.setdefault(row.rollout_id, []).append(row)
    return found


def finish_command(
    session: Session,
    command_id: int,
    *,
    status: CommandOutcome,
    outcome: str,
    now: datetime,
) -> None:
    """Mark a pending command applied or rejected, saying what came of it.

    :raises NotFound: when there is no such command.
    :raises Refused: when the command was handled already.
    """
    command = session.get(Command, command_id)
    if command is None:
        raise NotFound(f"no command {command_id}")
    if command.status != "pending":
        raise Refused(f"command {command_id} was already {command.status}")
    command.status = status
    command.outcome = outcome
    command.handled_at = now
    session.flush()
