"""Upgrading past 0008: evaluations stored before are relabelled with the roles they served
(0009), and every rollout gets its plan's step count (0010), read from the stored plan text."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from rolloutd.store.db import make_engine, migrations_config_path, upgrade
from tests.plans import memory_plan

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
# timeouts gates both canary steps and is a trigger; oom is a trigger only; the pause step
# (index 2) judges no gate, so there timeouts served as a trigger alone.
PLAN = memory_plan(triggers=("oom", "timeouts"))


def _config(url: str) -> Config:
    config = Config(str(migrations_config_path()))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    return config


def _on_0008(db_url: str) -> None:
    """One rollout of ``PLAN`` and its evaluations, as revision 0008 stored them."""
    command.upgrade(_config(db_url), "0008")
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO rollouts (id, name, service, environment, state, active, plan_hash,"
                " plan_source, plan_path, progress, revision, created_by, created_at,"
                " updated_at) VALUES (1, 'p', 's', 'staging', 'running', true, :hash, :source,"
                " 'plan.yaml', '{}', 0, 'alice', :at, :at)"
            ),
            {"hash": "a" * 64, "source": yaml.safe_dump(PLAN), "at": T0},
        )
        for step, gate, role in [
            (0, "timeouts", "trigger"),
            (1, "timeouts", "trigger"),
            (2, "timeouts", "trigger"),
            (1, "oom", "trigger"),
        ]:
            connection.execute(
                text(
                    "INSERT INTO gate_evaluations (rollout_id, step_index, gate, role, verdict,"
                    " evidence, evaluated_at) VALUES (1, :step, :gate, :role, 'pass', '{}', :at)"
                ),
                {"step": step, "gate": gate, "role": role, "at": T0},
            )
    engine.dispose()


def _read(db_url: str, query: str) -> list[Any]:
    engine = make_engine(db_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()


def test_evaluations_of_a_gate_that_was_also_a_trigger_are_relabelled_with_both_roles(
    db_url: str,
) -> None:
    """Where the step listed the trigger it served both roles; elsewhere it stays a trigger."""
    _on_0008(db_url)
    upgrade(db_url)
    rows = _read(db_url, "SELECT step_index, gate, role FROM gate_evaluations ORDER BY id")
    assert rows == [
        (0, "timeouts", "step+trigger"),
        (1, "timeouts", "step+trigger"),
        (2, "timeouts", "trigger"),
        (1, "oom", "trigger"),
    ]


def test_every_rollout_gets_its_plans_step_count(db_url: str) -> None:
    """The stored plan lists four steps (canary, canary, pause, full)."""
    _on_0008(db_url)
    upgrade(db_url)
    assert _read(db_url, "SELECT id, steps FROM rollouts") == [(1, 4)]


def test_a_downgrade_to_0008_keeps_every_evaluation_as_a_trigger(db_url: str) -> None:
    """0008 knew no evaluation with both roles: those go back to the role they were judged in."""
    _on_0008(db_url)
    upgrade(db_url)
    command.downgrade(_config(db_url), "0008")
    roles = _read(db_url, "SELECT DISTINCT role FROM gate_evaluations")
    assert roles == [("trigger",)]
