"""Every statement a tick runs is an index lookup on Postgres at 1,000 rollouts and 1M
evaluations: its cost follows the work of the tick, not the history in the database."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, text

from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

ROLLOUTS = 1000
EVALUATIONS = 1_000_000
# Tables that grow with the number of rollouts or their history; a sequential scan of one
# of these in a tick is a cost that grows with what the tick does not touch.
MOST_ROWS = 50
GROWING = {"rollouts", "gate_evaluations", "actions", "events", "commands", "step_progress"}


def _fill(store: StoreHandle, template_id: int) -> None:
    """999 more rollouts copied from the harness's, 1M evaluations spread over all of them,
    an action, an event, a command and a step row for each; then fresh planner statistics."""
    with store.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO rollouts (name, service, environment, state, active, plan_hash,"
                " plan_source, plan_path, steps, progress, revision, created_by, created_at,"
                " updated_at)"
                " SELECT name || i, service || i, environment, state, active, plan_hash,"
                " plan_source, plan_path, steps, progress, revision, created_by, created_at,"
                " updated_at"
                " FROM rollouts, generate_series(1, :n) AS i WHERE id = :id"
            ),
            {"n": ROLLOUTS - 1, "id": template_id},
        )
        connection.execute(
            text(
                "INSERT INTO gate_evaluations (rollout_id, step_index, gate, role, verdict,"
                " value, evidence, evaluated_at)"
                " SELECT r.id, 0, (ARRAY['timeouts', 'oom'])[1 + i % 2],"
                " CASE WHEN i % 2 = 0 THEN 'step' ELSE 'trigger' END, 'pass', 0.001, '{}',"
                " now() - make_interval(secs => i)"
                " FROM generate_series(1, :n) AS i"
                " JOIN rollouts r ON r.id = (SELECT min(id) FROM rollouts) + i % :rollouts"
            ),
            {"n": EVALUATIONS, "rollouts": ROLLOUTS},
        )
        for table, columns, values in (
            (
                "actions",
                "rollout_id, key, kind, payload, status, attempts, created_at",
                "id, 'w-' || id, 'set_weight', '{}', 'done', 1, now()",
            ),
            (
                "events",
                "rollout_id, kind, actor, detail, data, at",
                "id, 'started', 'bench', 'started', '{}', now()",
            ),
            (
                "commands",
                "rollout_id, kind, args, actor, created_at, status",
                "id, 'pause', '{}', 'alice', now(), 'applied'",
            ),
            (
                "step_progress",
                "rollout_id, step_index, name, kind, weight, entered_at",
                "id, 0, 'canary 5%', 'canary', 5, now()",
            ),
        ):
            connection.execute(
                text(
                    f"INSERT INTO {table} ({columns}) SELECT {values} FROM rollouts"
                    " WHERE id <> :id ON CONFLICT DO NOTHING"
                ),
                {"id": template_id},
            )
        connection.execute(text("ANALYZE"))


def _scans(plan: Any) -> list[tuple[str, str, float]]:
    """(node type, table, rows read) of every scan in a JSON plan (rows: with ANALYZE)."""
    found = []
    if "Relation Name" in plan:
        rows = plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1)
        rows += plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Index Recheck", 0)
        found.append((plan["Node Type"], plan["Relation Name"], rows))
    for child in plan.get("Plans", []):
        found.extend(_scans(child))
    return found


def test_a_ticks_statements_use_indexes_at_a_thousand_rollouts(pg_store: StoreHandle) -> None:
    """Run ticks of one rollout among 1,000 with 1M evaluations (1,000 of them its own),
    EXPLAIN each statement they ran: no sequential scan of a table that grows, and no read
    touches more than a few dozen rows of one (none reads the rollout's whole history)."""
    store = pg_store
    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    _fill(store, h.rollout_id)
    ran: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        ran.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        for _ in range(3):
            h.tick(seconds=30)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert h.tick() == "running"
    statements = {s: p for s, p in ran if s.split()[0] in ("SELECT", "UPDATE", "DELETE")}
    assert len(statements) >= 6, list(statements)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        seq = []
        wide = []
        for statement, parameters in statements.items():
            analyze = "ANALYZE, " if statement.startswith("SELECT") else ""
            cursor.execute(f"EXPLAIN ({analyze}FORMAT JSON) {statement}", parameters)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            for node, table, rows in _scans(plan[0]["Plan"]):
                if table in GROWING and node == "Seq Scan":
                    seq.append(f"{table}: {statement}")
                if table in GROWING and rows > MOST_ROWS:
                    wide.append(f"{table}: {rows:g} rows: {statement}")
        raw.rollback()
    finally:
        raw.close()
    assert not seq, "\n".join(seq)
    assert not wide, "\n".join(wide)
