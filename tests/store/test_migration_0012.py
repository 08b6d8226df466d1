"""Upgrading past 0011: suite jobs stored before get their deterministic names (0012), in the
order they were written within their step, and a downgrade takes the new tables away."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from rolloutd.store.db import make_engine, migrations_config_path, upgrade

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def _config(url: str) -> Config:
    config = Config(str(migrations_config_path()))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    return config


def _on_0011(db_url: str) -> None:
    """A rollout with four suite jobs of two gates over two steps, as 0011 stored them."""
    command.upgrade(_config(db_url), "0011")
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO rollouts (id, name, service, environment, state, active, plan_hash,"
                " plan_source, plan_path, steps, progress, revision, created_by, created_at,"
                " updated_at) VALUES (7, 'p', 's', 'staging', 'running', true, :hash, '',"
                " 'plan.yaml', 2, '{}', 0, 'alice', :at, :at)"
            ),
            {"hash": "a" * 64, "at": T0},
        )
        for gate, step, state in [
            ("tool_args", 0, "superseded"),
            ("exactness", 0, "done"),
            ("tool_args", 1, "done"),
            ("tool_args", 1, "open"),
        ]:
            connection.execute(
                text(
                    "INSERT INTO suite_jobs (rollout_id, gate, step_index, state, due_at,"
                    " attempts) VALUES (7, :gate, :step, :state, :at, 1)"
                ),
                {"gate": gate, "step": step, "state": state, "at": T0},
            )
    engine.dispose()


def _read(db_url: str, query: str) -> list[Any]:
    engine = make_engine(db_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()


def test_jobs_stored_before_are_named_run_k_of_their_gate_and_step(db_url: str) -> None:
    """Each job is named after its rollout, gate and step, numbered in the order written."""
    _on_0011(db_url)
    upgrade(db_url)
    assert _read(db_url, "SELECT name FROM suite_jobs ORDER BY id") == [
        ("rollout-7/tool_args/step-0/run-1",),
        ("rollout-7/exactness/step-0/run-1",),
        ("rollout-7/tool_args/step-1/run-1",),
        ("rollout-7/tool_args/step-1/run-2",),
    ]
    engine = make_engine(db_url)
    try:
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO suite_jobs (name, rollout_id, gate, step_index, state, due_at,"
                    " attempts) VALUES ('rollout-7/exactness/step-0/run-1', 7, 'exactness', 0,"
                    " 'done', :at, 1)"
                ),
                {"at": T0},
            )
    finally:
        engine.dispose()


def test_a_downgrade_to_0011_drops_the_names_and_the_new_tables(db_url: str) -> None:
    """0011 knew no cancelled job: those read as superseded, the step's run they were."""
    _on_0011(db_url)
    upgrade(db_url)
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE suite_jobs SET state = 'cancelled' WHERE state = 'open'"))
    engine.dispose()
    command.downgrade(_config(db_url), "0011")
    engine = make_engine(db_url)
    try:
        tables = set(inspect(engine).get_table_names())
        columns = {column["name"] for column in inspect(engine).get_columns("suite_jobs")}
    finally:
        engine.dispose()
    assert not {"suite_job_cases", "suite_samples"} & tables
    assert "name" not in columns
    assert _read(db_url, "SELECT state FROM suite_jobs ORDER BY id")[-1] == ("superseded",)
