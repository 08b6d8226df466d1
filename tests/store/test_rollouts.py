"""Tests of rollout rows: one active rollout per service and environment, optimistic writes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import false, text, true
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound, Refused
from rolloutd.store.errors import StaleWrite
from rolloutd.store.queries import (
    create_rollout,
    get_rollout,
    list_events,
    list_rollouts,
    save_progress,
)
from tests.store.locks import wait_for_lock_wait

if TYPE_CHECKING:
    from conftest import StoreHandle

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _create(
    session: Session,
    *,
    service: str = "agent-70b",
    environment: str = "prod",
    now: datetime = T0,
    **overrides: Any,
) -> int:
    fields: dict[str, Any] = {
        "name": f"{service}-seq8k",
        "service": service,
        "environment": environment,
        "plan_hash": "a" * 64,
        "plan_source": "steps:\n  - shadow: {}\n",
        "plan_path": "config/plans/agent-70b.yaml",
        "steps": 1,
        "progress": {"step": 0},
        "state": "shadow",
        "actor": "alice",
        "now": now,
    }
    fields.update(overrides)
    return create_rollout(session, **fields)


def test_create_rollout_stores_the_plan_and_records_a_created_event(session: Session) -> None:
    """A new rollout is active at revision 0 with its plan, and the audit log says who made it."""
    rollout_id = _create(session)
    session.commit()
    rollout = get_rollout(session, rollout_id)
    assert (rollout.active, rollout.revision, rollout.state) == (True, 0, "shadow")
    assert rollout.plan_source == "steps:\n  - shadow: {}\n"
    assert rollout.created_at == T0
    [event] = list_events(session, rollout_id)
    assert (event.kind, event.actor, event.at) == ("created", "alice", T0)
    assert event.data["plan_hash"] == "a" * 64


def test_second_active_rollout_of_same_service_and_environment_is_refused(
    session: Session,
) -> None:
    """Starting a rollout while one of the same service+env is active is refused, naming it."""
    first = _create(session)
    session.commit()
    with pytest.raises(Refused) as caught:
        _create(session, name="again")
    assert str(caught.value) == (
        f"rollout {first} of agent-70b/prod is still shadow; abort it or wait for it to finish"
    )
    session.rollback()
    assert [r.id for r in list_rollouts(session)] == [first]
    assert len(list_events(session, first)) == 1


def test_rollouts_of_other_environments_or_services_are_allowed(session: Session) -> None:
    """The one-active rule is per service and environment, not global."""
    _create(session)
    _create(session, environment="staging")
    _create(session, service="embedder")
    session.commit()
    assert len(list_rollouts(session, active_only=True)) == 3


def test_new_rollout_is_allowed_once_the_previous_one_is_inactive(session: Session) -> None:
    """After the active rollout finishes (active=False), the same service+env may start again."""
    first = _create(session)
    save_progress(
        session,
        get_rollout(session, first),
        progress={"step": 3},
        state="complete",
        active=False,
        now=T0 + timedelta(hours=96),
    )
    second = _create(session, now=T0 + timedelta(hours=97))
    session.commit()
    assert [r.id for r in list_rollouts(session, active_only=True)] == [second]


@pytest.mark.postgres
def test_concurrent_creation_on_postgres_lets_exactly_one_win(pg_store: StoreHandle) -> None:
    """Two sessions racing past the check both insert; the partial index refuses the second."""
    winner = pg_store.sessions()
    loser = pg_store.sessions()
    outcome: dict[str, BaseException | int] = {}

    def create_in_loser() -> None:
        try:
            outcome["result"] = _create(loser)
            loser.commit()
        except BaseException as exc:  # handed to the main thread to assert on
            outcome["result"] = exc

    winner_id = _create(winner)
    racer = threading.Thread(target=create_in_loser)
    racer.start()
    # The loser has passed its check and is blocked on the unique index behind the winner's
    # uncommitted row: only now is the race the one the index must settle.
    wait_for_lock_wait(pg_store, "the second insert")
    winner.commit()
    racer.join(timeout=10)
    assert not racer.is_alive(), "the second creation never finished"

    result = outcome["result"]
    assert isinstance(result, Refused), result
    assert str(result).startswith(f"rollout {winner_id} of agent-70b/prod is still shadow")
    assert loser.execute(text("SELECT 1")).scalar() == 1
    loser.rollback()
    assert [r.id for r in list_rollouts(loser)] == [winner_id]
    winner.close()
    loser.close()


def test_get_rollout_of_unknown_id_is_not_found(session: Session) -> None:
    """Asking for a rollout that does not exist raises NotFound with its id."""
    with pytest.raises(NotFound, match="no rollout 404"):
        get_rollout(session, 404)


def test_list_rollouts_is_newest_first_and_limited(session: Session) -> None:
    """Listing returns the newest rollouts first, at most `limit`, optionally only active ones."""
    ids = [_create(session, service=f"svc{i}", now=T0 + timedelta(minutes=i)) for i in range(4)]
    save_progress(
        session,
        get_rollout(session, ids[3]),
        progress={},
        state="aborted",
        active=False,
        now=T0 + timedelta(hours=1),
    )
    session.commit()
    assert [r.id for r in list_rollouts(session)] == ids[::-1]
    assert [r.id for r in list_rollouts(session, limit=2)] == [ids[3], ids[2]]
    assert [r.id for r in list_rollouts(session, active_only=True)] == ids[2::-1]


def test_save_progress_bumps_the_revision(session: Session) -> None:
    """A save writes progress, state and time and moves the revision on by one."""
    rollout = get_rollout(session, _create(session))
    later = T0 + timedelta(minutes=5)
    save_progress(session, rollout, progress={"step": 1}, state="canary", active=True, now=later)
    session.commit()
    assert (rollout.revision, rollout.state, rollout.updated_at) == (1, "canary", later)
    session.expire_all()
    stored = get_rollout(session, rollout.id)
    assert (stored.revision, stored.progress, stored.updated_at) == (1, {"step": 1}, later)


def test_save_progress_from_a_stale_read_is_refused(store: StoreHandle) -> None:
    """When another writer saved since we read, our save raises StaleWrite and writes nothing."""
    with store.sessions() as setup:
        rollout_id = _create(setup)
        setup.commit()
    with store.sessions() as reader:
        mine = get_rollout(reader, rollout_id)
        reader.commit()
    with store.sessions() as other:
        theirs = get_rollout(other, rollout_id)
        save_progress(other, theirs, progress={"step": 1}, state="canary", active=True, now=T0)
        other.commit()
    with store.sessions() as writer:
        writer.add(mine)
        with pytest.raises(StaleWrite, match=f"rollout {rollout_id} changed since revision 0"):
            save_progress(writer, mine, progress={"step": 9}, state="steady", active=True, now=T0)
        writer.rollback()
        writer.expire_all()
        assert get_rollout(writer, rollout_id).progress == {"step": 1}


def test_save_progress_honours_the_fence(session: Session) -> None:
    """A fence condition that does not hold stops the write like a stale revision does."""
    rollout = get_rollout(session, _create(session))
    with pytest.raises(StaleWrite):
        save_progress(session, rollout, progress={}, state="x", active=True, now=T0, fence=false())
    assert rollout.revision == 0
    save_progress(session, rollout, progress={}, state="x", active=True, now=T0, fence=true())
    assert rollout.revision == 1
