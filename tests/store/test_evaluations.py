"""Tests of gate evaluations: the newest verdict per gate, and a gate's recent values."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rolloutd.store import evaluations
from rolloutd.store.models import GateEvaluation, Rollout
from rolloutd.store.queries import (
    latest_evaluations,
    recent_values,
    record_evaluation,
)
from tests.store.seed import T0, seed_rollout


def _record(
    session: Session,
    rollout_id: int,
    gate: str,
    minute: int,
    value: float | None,
    *,
    step_index: int = 1,
    verdict: str = "pass",
    **extra: Any,
) -> int:
    fields: dict[str, Any] = {
        "rollout_id": rollout_id,
        "step_index": step_index,
        "gate": gate,
        "role": "step",
        "verdict": verdict,
        "value": value,
        "threshold": "< 0.01",
        "query": "sum(rate(nv_inference_request_failure{reason='REJECTED'}[5m]))",
        "samples": 400,
        "statistic": None,
        "reason": None,
        "evidence": {"canary": value},
        "evaluated_at": T0 + timedelta(minutes=minute),
    }
    fields.update(extra)
    return record_evaluation(session, **fields)


GATES = ["queue_timeouts", "schema_violations", "p95_latency", "oom", "never_evaluated"]


@pytest.fixture(params=["ranked", "by_gate"])
def latest(request: pytest.FixtureRequest) -> Callable[..., dict[str, Any]]:
    """latest_evaluations ranking all of a rollout's rows, or looking up the plan's gates."""
    gates = GATES if request.param == "by_gate" else None
    return functools.partial(latest_evaluations, gates=gates)


def test_latest_evaluations_holds_the_newest_verdict_of_each_gate(
    session: Session, latest: Callable[..., dict[str, Any]]
) -> None:
    """For each gate name, the evaluation with the latest time wins, whatever the insert order."""
    rollout_id = seed_rollout(session)
    _record(session, rollout_id, "queue_timeouts", 2, 0.004)
    newest_timeouts = _record(session, rollout_id, "queue_timeouts", 3, 0.006, verdict="fail")
    _record(session, rollout_id, "queue_timeouts", 1, 0.001)
    newest_schema = _record(
        session,
        rollout_id,
        "schema_violations",
        2,
        None,
        verdict="inconclusive",
        reason="query returned no series",
    )
    session.commit()
    newest = latest(session, rollout_id)
    assert {gate: e.id for gate, e in newest.items()} == {
        "queue_timeouts": newest_timeouts,
        "schema_violations": newest_schema,
    }
    assert newest["schema_violations"].reason == "query returned no series"
    assert newest["queue_timeouts"].evidence == {"canary": 0.006}


def test_latest_evaluations_for_a_step_ignore_other_steps(
    session: Session, latest: Callable[..., dict[str, Any]]
) -> None:
    """With step_index, a verdict from another step never stands in for the current one."""
    rollout_id = seed_rollout(session)
    step_one = _record(session, rollout_id, "p95_latency", 1, 2.1, step_index=1)
    _record(session, rollout_id, "p95_latency", 5, 2.4, step_index=2)
    _record(session, rollout_id, "oom", 6, 0.0, step_index=2)
    assert {g: e.id for g, e in latest(session, rollout_id, step_index=1).items()} == {
        "p95_latency": step_one
    }
    assert set(latest(session, rollout_id, step_index=2)) == {"p95_latency", "oom"}
    assert latest(session, rollout_id, step_index=3) == {}


def test_recent_values_are_newest_first_and_keep_missing_values(session: Session) -> None:
    """recent_values returns the last `limit` values of one gate, newest first, None included."""
    rollout_id = seed_rollout(session)
    for minute, value in enumerate([0.01, 0.02, None, 0.04]):
        _record(session, rollout_id, "escalations", minute, value)
    _record(session, rollout_id, "other", 9, 9.0)
    assert recent_values(session, rollout_id, "escalations", 3) == [0.04, None, 0.02]
    assert recent_values(session, rollout_id, "missing", 3) == []


@pytest.mark.parametrize("chunked", [False, True])
def test_latest_of_rollouts_holds_each_rollouts_newest_verdict_of_its_own_gates(
    session: Session, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    """By rollout and gate, the newest verdict; a gate another rollout has, or one never
    evaluated, is absent. Split into a statement per gate and per rollout (``chunked``), the
    answer is the same."""
    if chunked:
        monkeypatch.setattr(evaluations, "_GATES_A_STATEMENT", 1)
        monkeypatch.setattr(evaluations, "_IDS_A_STATEMENT", 1)
    first, second = seed_rollout(session, "svc-a"), seed_rollout(session, "svc-b")
    _record(session, first, "queue_timeouts", 1, 0.01, verdict="fail")
    _record(session, first, "queue_timeouts", 2, 0.002)
    _record(session, first, "oom", 1, 0.0)
    _record(session, second, "queue_timeouts", 3, None, verdict="inconclusive")
    _record(session, second, "p95_latency", 1, 2.5)
    latest = evaluations.latest_of_rollouts(
        session, {first: ["queue_timeouts", "oom", "never_evaluated"], second: ["queue_timeouts"]}
    )
    found = {
        rollout_id: {gate: (row.verdict, row.value) for gate, row in rows.items()}
        for rollout_id, rows in latest.items()
    }
    assert found == {
        first: {"queue_timeouts": ("pass", 0.002), "oom": ("pass", 0.0)},
        second: {"queue_timeouts": ("inconclusive", None)},
    }


@pytest.mark.parametrize("chunked", [False, True])
def test_latest_of_rollouts_selected_by_a_condition_answers_as_by_their_ids(
    session: Session, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    """A scrape selects its rollouts by a condition rather than by 10,000 ids: the answer is
    the one the ids give, and a rollout the condition selects that the caller did not read
    (one that became visible in between) is left out rather than failing the scrape."""
    if chunked:
        monkeypatch.setattr(evaluations, "_GATES_A_STATEMENT", 1)
    first, second = seed_rollout(session, "svc-a"), seed_rollout(session, "svc-b")
    late = seed_rollout(session, "svc-late")
    _record(session, first, "queue_timeouts", 1, 0.01, verdict="fail")
    _record(session, first, "queue_timeouts", 2, 0.002)
    _record(session, first, "oom", 1, 0.0)
    _record(session, second, "queue_timeouts", 3, None, verdict="inconclusive")
    _record(session, late, "queue_timeouts", 4, 0.5)
    gates = {first: ["queue_timeouts", "oom"], second: ["queue_timeouts"]}
    by_ids = evaluations.latest_of_rollouts(session, gates)
    selected = evaluations.latest_of_rollouts(session, gates, among=Rollout.active.is_(True))
    assert selected == by_ids
    assert set(selected) == {first, second}
    assert {g: r.value for g, r in selected[first].items()} == {"queue_timeouts": 0.002, "oom": 0.0}


def test_a_batch_of_verdicts_reads_back_as_each_was_given(session: Session) -> None:
    """A tick's batch (COPY on Postgres, an executemany elsewhere) stores every column as
    given: text that COPY must escape (tabs, newlines, backslashes, quotes), absent values,
    a NaN value (NULL on SQLite), nested evidence and the time to the microsecond."""
    rollout_id = seed_rollout(session)
    awkward = 'tab\there\nnewline \\N back\\slash "quoted" \u00e9\u2013'
    given: list[evaluations.NewEvaluation] = [
        {
            "rollout_id": rollout_id,
            "step_index": index,
            "gate": f"gate-{index}",
            "role": "step+trigger" if index else "trigger",
            "verdict": "breach" if index else "inconclusive",
            "value": [float("nan"), None, 0.125][index],
            "threshold": None if index == 1 else "<= 0.01",
            "query": awkward if index == 2 else None,
            "samples": [None, 0, 5000][index],
            "statistic": [1.5, None, -2.25][index],
            "reason": awkward if index == 0 else None,
            "evidence": {"canary": {"values": [1, 2.5, None]}, "note": awkward} if index else {},
            "evaluated_at": T0 + timedelta(seconds=index, microseconds=123_456),
        }
        for index in range(3)
    ]
    evaluations.record_evaluations(session, given)
    session.flush()
    stored = session.scalars(
        select(GateEvaluation)
        .where(GateEvaluation.rollout_id == rollout_id)
        .order_by(GateEvaluation.step_index)
    ).all()
    columns = [c for c in given[0] if c != "value"]
    assert [{c: getattr(row, c) for c in columns} for row in stored] == [
        {c: g[c] for c in columns} for g in given
    ]
    nan = stored[0].value
    if session.get_bind().dialect.name == "sqlite":
        assert nan is None  # SQLite has no NaN: it stores NULL
    else:
        assert nan is not None and math.isnan(nan)
    assert stored[1].value is None and stored[2].value == 0.125
