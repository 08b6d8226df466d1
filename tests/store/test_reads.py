"""The read-only commands' Core reads: their clauses match the models, and they read what the
ORM queries read, on a Session and on a bare Connection alike."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import Table
from sqlalchemy.orm import Session

from rolloutd.errors import NotFound
from rolloutd.store import queries, reads
from rolloutd.store.models import Base
from tests.store.seed import T0, seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle


@pytest.mark.parametrize("clause", [reads.ROLLOUTS, reads.STEPS, reads.EVALUATIONS, reads.LEASES])
def test_each_clause_names_columns_of_its_table_with_their_types(clause: Any) -> None:
    """A column a clause reads exists in the model's table, with the model's type."""
    table = Base.metadata.tables[clause.name]
    assert isinstance(table, Table)
    for column in clause.c:
        assert column.name in table.c, (clause.name, column.name)
        assert type(column.type) is type(table.c[column.name].type), (clause.name, column.name)


def test_a_rollout_reads_as_the_orm_loads_it(store: StoreHandle) -> None:
    """Every field of the row equals the mapped object's, times aware and JSON parsed; an
    unknown id is NotFound."""
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session)
    with store.sessions() as session:
        mapped = queries.get_rollout(session, rollout_id)
        expected = {field: getattr(mapped, field) for field in reads.RolloutRow._fields}
    with store.engine.connect() as connection:
        row = reads.get_rollout(connection, rollout_id)
        assert row._asdict() == expected
        assert row.created_at.tzinfo is not None
        with pytest.raises(NotFound, match="no rollout 4242"):
            reads.get_rollout(connection, 4242)


def test_rollouts_are_listed_newest_first_and_active_ones_alone(store: StoreHandle) -> None:
    """As ``queries.list_rollouts``: newest first, up to the limit, or only the active ones."""
    with store.sessions.begin() as session:
        ids = [seed_rollout(session, service=f"s{i}") for i in range(3)]
        ended = queries.get_rollout(session, ids[1])
        queries.save_progress(session, ended, progress={}, state="completed", active=False, now=T0)
    with store.engine.connect() as connection:
        assert [r.id for r in reads.list_rollouts(connection)] == ids[::-1]
        assert [r.id for r in reads.list_rollouts(connection, limit=2)] == ids[:0:-1]
        assert [r.id for r in reads.list_rollouts(connection, active_only=True)] == [
            ids[2],
            ids[0],
        ]


def test_step_names_are_the_recorded_ones_by_rollout_and_step(store: StoreHandle) -> None:
    """The name of each recorded step of the rollouts asked for, and nothing of the others."""
    with store.sessions.begin() as session:
        first, second = seed_rollout(session, service="a"), seed_rollout(session, service="b")
        for rollout_id, index, name in ((first, 0, "shadow"), (first, 1, "canary 5%")):
            queries.upsert_step(
                session, rollout_id=rollout_id, step_index=index, name=name, kind="x", weight=0.0
            )
        queries.upsert_step(
            session, rollout_id=second, step_index=0, name="other", kind="x", weight=0.0
        )
    with store.engine.connect() as connection:
        assert reads.step_names(connection, [first]) == {
            (first, 0): "shadow",
            (first, 1): "canary 5%",
        }
        assert reads.step_names(connection, []) == {}


def _evaluate(session: Session, rollout_id: int, gate: str, step: int, minute: int) -> None:
    queries.record_evaluation(
        session,
        rollout_id=rollout_id,
        step_index=step,
        gate=gate,
        role="step",
        verdict="pass",
        value=float(minute),
        threshold="< 0.01",
        query=None,
        samples=400,
        statistic=None,
        reason=f"at minute {minute}",
        evidence={"load": {"ratio": 0.8}},
        evaluated_at=T0 + timedelta(minutes=minute),
    )


def test_newest_evaluations_are_the_orm_querys_on_a_session_and_a_connection(
    store: StoreHandle,
) -> None:
    """Per gate the newest of one step, or of any step, as ``latest_evaluations`` finds them,
    read in the session's transaction or on a connection of its own."""
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session)
        for gate, step, minute in (("errors", 1, 1), ("errors", 2, 2), ("errors", 1, 3)):
            _evaluate(session, rollout_id, gate, step, minute)
        _evaluate(session, rollout_id, "oom", 1, 4)
    with store.sessions() as session:
        orm_step = queries.latest_evaluations(session, rollout_id, step_index=2, gates=["errors"])
        orm_any = queries.latest_evaluations(session, rollout_id, gates=["oom", "errors"])
        wanted: list[tuple[str, int | None]] = [("errors", 2), ("oom", None)]
        in_session = reads.newest_evaluations(session, rollout_id, wanted)
    with store.engine.connect() as connection:
        on_connection = reads.newest_evaluations(connection, rollout_id, wanted)
        assert reads.newest_evaluations(connection, rollout_id, []) == {}
    assert in_session == on_connection
    for gate, orm in (("errors", orm_step["errors"]), ("oom", orm_any["oom"])):
        assert in_session[gate]._asdict() == {
            field: getattr(orm, field) for field in reads.EvaluationRow._fields
        }
    assert on_connection["errors"].value == 2.0
