"""Tests of storing suite runs: a run comes back whole, and the newest run is found."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from rolloutd.evaluation import records
from rolloutd.evaluation.results import RunSummary
from tests.store.seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle


def test_a_stored_run_reads_back_equal(
    store: StoreHandle, profile_runs: dict[str, RunSummary]
) -> None:
    """Cases, fields (values with their JSON types) and figures survive the database."""
    run = profile_runs["int4-like"]
    with store.sessions.begin() as session:
        run_id = records.store_run(session, run)
    with store.sessions() as session:
        loaded = records.load_run(session, run_id)
    assert loaded is not None
    assert loaded == dataclasses.replace(run, run_id=run_id, extra=loaded.extra)
    assert loaded.exactness == run.exactness and loaded.fields == run.fields
    assert loaded.extra["seed"] == run.extra["seed"]


def test_latest_run_picks_the_newest_of_a_rollout_gate_and_role(
    session: Session, profile_runs: dict[str, RunSummary]
) -> None:
    """Filtering by role, gate and digest; newest by finish time."""
    rollout_id = seed_rollout(session)
    exact = profile_runs["exact"]
    older = dataclasses.replace(exact, role="baseline")
    newer = dataclasses.replace(
        older, finished_at=older.finished_at + timedelta(hours=24), cases=older.cases[:10]
    )
    for run in (older, newer, exact):
        records.store_run(session, run, rollout_id=rollout_id, step_index=0, gate="shadow")
    found = records.latest_run(session, rollout_id=rollout_id, role="baseline", gate="shadow")
    assert found is not None and len(found.cases) == 10
    assert records.latest_run(session, rollout_id=rollout_id, role="baseline", gate="other") is None
    assert (
        records.latest_run(session, rollout_id=rollout_id, role="canary", suite_sha256="0" * 64)
        is None
    )
    last = records.last_run_at(session, rollout_id=rollout_id, gate="shadow")
    assert last == exact.finished_at
    assert records.schema_counts(session, rollout_id=rollout_id, role="canary")[:2] == (0, 300)
