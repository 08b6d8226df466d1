"""Tests of operator commands: queued in order, handled once, and announced on Postgres."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound, Refused
from rolloutd.store.models import Command
from rolloutd.store.queries import (
    COMMANDS_CHANNEL,
    add_command,
    finish_command,
    pending_commands,
)
from tests.store.seed import T0, seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle


def test_pending_commands_are_oldest_first_until_finished(session: Session) -> None:
    """Commands wait as pending in arrival order; a finished one leaves the queue."""
    rollout_id = seed_rollout(session)
    pause = add_command(
        session,
        rollout_id=rollout_id,
        kind="pause",
        args={},
        actor="bob",
        reason="investigating p95",
        now=T0 + timedelta(minutes=2),
    ).id
    promote = add_command(
        session,
        rollout_id=rollout_id,
        kind="promote",
        args={"full": True},
        actor="alice",
        reason=None,
        now=T0 + timedelta(minutes=3),
    ).id
    session.commit()
    assert [c.id for c in pending_commands(session, rollout_id)] == [pause, promote]

    finish_command(
        session, pause, status="applied", outcome="paused at step 1", now=T0 + timedelta(minutes=4)
    )
    session.commit()
    [left] = pending_commands(session, rollout_id)
    assert (left.id, left.kind, left.args, left.actor) == (
        promote,
        "promote",
        {"full": True},
        "alice",
    )
    handled = session.get_one(Command, pause)
    assert (handled.status, handled.outcome, handled.handled_at) == (
        "applied",
        "paused at step 1",
        T0 + timedelta(minutes=4),
    )


def test_a_command_is_handled_only_once(session: Session) -> None:
    """Finishing a command twice is refused; the first outcome stands."""
    rollout_id = seed_rollout(session)
    command_id = add_command(
        session, rollout_id=rollout_id, kind="abort", args={}, actor="bob", reason="OOM", now=T0
    ).id
    finish_command(session, command_id, status="rejected", outcome="already complete", now=T0)
    with pytest.raises(Refused, match=f"command {command_id} was already rejected"):
        finish_command(session, command_id, status="applied", outcome="", now=T0)


def test_commands_for_unknown_rollouts_or_ids_are_not_found(session: Session) -> None:
    """A command for a missing rollout, or finishing a missing command, raises NotFound."""
    with pytest.raises(NotFound, match="no rollout 99"):
        add_command(session, rollout_id=99, kind="pause", args={}, actor="bob", reason=None, now=T0)
    with pytest.raises(NotFound, match="no command 98"):
        finish_command(session, 98, status="applied", outcome="", now=T0)


@pytest.mark.postgres
def test_committed_command_wakes_listeners_on_postgres(pg_store: StoreHandle) -> None:
    """add_command sends NOTIFY with the rollout id, delivered on commit and not on rollback."""
    with pg_store.sessions() as session:
        rolled_back, committed = seed_rollout(session), seed_rollout(session, service="embedder")
        session.commit()
    with psycopg.connect(pg_store.url, autocommit=True) as listener:
        listener.execute(f"LISTEN {COMMANDS_CHANNEL}")
        with pg_store.sessions() as session:
            add_command(
                session,
                rollout_id=rolled_back,
                kind="pause",
                args={},
                actor="bob",
                reason=None,
                now=T0,
            )
            session.rollback()
            add_command(
                session,
                rollout_id=committed,
                kind="abort",
                args={},
                actor="bob",
                reason="OOM on canary-2",
                now=T0,
            )
            session.commit()
        received = list(listener.notifies(timeout=2.0, stop_after=1))
    assert [(n.channel, n.payload) for n in received] == [(COMMANDS_CHANNEL, str(committed))]


def test_the_database_records_the_role_that_inserted_a_command(
    session: Session, db_backend: str
) -> None:
    """On Postgres a command row names current_user as its db_role, whatever the client
    writes into the column, now or later by UPDATE; SQLite has no roles and leaves it NULL."""
    rollout_id = seed_rollout(session)
    queued = add_command(
        session, rollout_id=rollout_id, kind="pause", args={}, actor="root", reason=None, now=T0
    )
    role = session.scalar(text("SELECT current_user")) if db_backend == "postgres" else None
    assert queued.db_role == role
    forged = Command(
        rollout_id=rollout_id,
        kind="abort",
        args={},
        actor="root",
        db_role="rolloutd_daemon",
        reason=None,
        created_at=T0,
        status="pending",
    )
    session.add(forged)
    session.flush()
    session.execute(update(Command).values(db_role="someone_else"))
    session.expire_all()
    stored = {c.id: c.db_role for c in session.scalars(select(Command))}
    if db_backend == "postgres":
        assert stored == {queued.id: role, forged.id: role}
    else:
        # No roles, nothing to enforce: SQLite keeps what it is given.
        assert stored[queued.id] == "someone_else"
