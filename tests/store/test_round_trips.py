"""The leader's round-trip count: what the batched tick's cost figure is measured with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import text

from rolloutd.store.db import RoundTrips, make_engine, session_factory
from rolloutd.store.evaluations import NewEvaluation, record_evaluations
from tests.store.seed import T0, seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle


def test_a_transaction_of_two_statements_counts_its_begin_statements_commit_and_ping(
    store: StoreHandle,
) -> None:
    """BEGIN, two statements and COMMIT are four round trips, plus one: the pool's pre-ping at
    checkout on Postgres, the explicit ``BEGIN IMMEDIATE`` statement on SQLite. Reading the
    count costs nothing, and an executemany is one."""
    engine = make_engine(store.url)
    trips = RoundTrips(engine)
    sessions = session_factory(engine)
    try:
        with sessions.begin() as session:  # a first connection: the pool pings nothing new
            session.execute(text("SELECT 1"))
        start = trips.count
        assert trips.count == start
        with sessions.begin() as session:
            session.execute(text("SELECT 1"))
            session.execute(text("SELECT 2"))
        assert trips.count - start == 5
        with sessions.begin() as session:
            session.execute(text("CREATE TEMPORARY TABLE t (x integer)"))
            session.execute(text("INSERT INTO t (x) VALUES (:x)"), [{"x": i} for i in range(50)])
        assert trips.count - start == 2 * 5
    finally:
        engine.dispose()


def test_a_batch_of_verdicts_is_one_round_trip(store: StoreHandle) -> None:
    """The tick's evaluations go in one round trip whatever their number (COPY on Postgres,
    which SQLAlchemy's events do not see, is counted by hand)."""
    engine = make_engine(store.url)
    trips = RoundTrips(engine)
    sessions = session_factory(engine)
    try:
        with sessions.begin() as session:
            rollout_id = seed_rollout(session)
        rows: list[NewEvaluation] = [
            {
                "rollout_id": rollout_id,
                "step_index": 0,
                "gate": f"g{i}",
                "role": "step",
                "verdict": "pass",
                "value": 0.5,
                "threshold": None,
                "query": None,
                "samples": None,
                "statistic": None,
                "reason": None,
                "evidence": {},
                "evaluated_at": T0,
            }
            for i in range(300)
        ]
        with sessions.begin() as session:
            session.execute(text("SELECT 1"))
            start = trips.count
            record_evaluations(session, rows)
            assert trips.count - start == 1
            stored = session.execute(text("SELECT count(*) FROM gate_evaluations")).scalar()
        assert stored == 300
    finally:
        engine.dispose()
