"""A rollout row to hang commands, events, actions and evaluations on in store tests, and
copies of a rollout for tests that count what a read costs as rollouts grow."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from rolloutd.store.queries import create_rollout

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def seed_rollout(session: Session, service: str = "agent-70b", state: str = "canary") -> int:
    """Create an active rollout of ``service`` at ``T0`` and return its id."""
    return create_rollout(
        session,
        name="r",
        service=service,
        environment="prod",
        plan_hash="c" * 64,
        plan_source="",
        plan_path="plan.yaml",
        steps=1,
        progress={},
        state=state,
        actor="alice",
        now=T0,
    )


_COPIED = (
    "environment, state, active, plan_hash, plan_source, plan_path, steps, progress, revision,"
    " created_by, created_at, updated_at, plan_outline"
)


def copy_rollout(
    engine: Engine, rollout_id: int, copies: int, *, with_evaluations: bool, tag: str = "copy"
) -> list[int]:
    """``copies`` more rollouts like ``rollout_id`` (its name and service suffixed with
    ``tag`` and a number), each with a copy of its evaluations or with none; their ids."""
    made = []
    with engine.begin() as connection:
        for i in range(copies):
            connection.execute(
                text(
                    f"INSERT INTO rollouts (name, service, {_COPIED})"
                    f" SELECT name || :suffix, service || :suffix, {_COPIED}"
                    " FROM rollouts WHERE id = :id"
                ),
                {"suffix": f"-{tag}-{i}", "id": rollout_id},
            )
            new = connection.execute(text("SELECT max(id) FROM rollouts")).scalar_one()
            if with_evaluations:
                connection.execute(
                    text(
                        "INSERT INTO gate_evaluations (rollout_id, step_index, gate, role,"
                        " verdict, value, threshold, query, samples, statistic, reason,"
                        " evidence, evaluated_at)"
                        " SELECT :new, step_index, gate, role, verdict, value, threshold, query,"
                        " samples, statistic, reason, evidence, evaluated_at"
                        " FROM gate_evaluations WHERE rollout_id = :id"
                    ),
                    {"new": new, "id": rollout_id},
                )
            made.append(int(new))
    return made


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on ``engine`` inside the block, in order."""
    ran: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        ran.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield ran
    finally:
        event.remove(engine, "before_cursor_execute", record)
