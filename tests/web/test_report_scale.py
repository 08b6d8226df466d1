"""The report of a 48 h bake: 200,000 stored evaluations drawn as a few hundred points a gate,
with every verdict change and the evaluation the rollback acted on among them.

:func:`build_bake` makes that rollout in a database; ``bench/report.py`` times the report on
it (tests assert behaviour, the bench measures time).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from rolloutd.cli.ctl import cli
from rolloutd.core.progress import Progress, RollbackFacts
from rolloutd.store import queries
from rolloutd.store.models import Event, GateEvaluation
from rolloutd.store.retention import DECISIVE_EVENTS
from rolloutd.web.data import MAX_POINTS
from rolloutd.web.pages import rollout_html, rollout_json
from tests.plans import memory_plan
from tests.twins import T0, Leader

if TYPE_CHECKING:
    from conftest import StoreHandle

EVALUATIONS = 200_000
BAKE = timedelta(hours=48)
BATCH = 5_000
# Four step gates and two rollback triggers, as bench/scale.py runs them: the signal, the
# canary's typical value, its threshold, and whether the gate counts requests.
GATES: dict[str, tuple[str, float, float, bool]] = {
    "oom": ("oom_events", 0.0, 0.0, False),
    "xid": ("xid_errors", 0.0, 0.0, False),
    "errors": ("error_rate", 0.002, 0.01, True),
    "timeouts": ("queue_timeout_rate", 0.003, 0.01, True),
    "ttft": ("ttft_p99", 0.6, 2.0, True),
    "e2e": ("e2e_latency", 1.4, 5.0, True),
}
TRIGGERS = ("oom", "xid")
STEP_GATES = tuple(g for g in GATES if g not in TRIGGERS)
BREACHING = "oom"
OUTAGE = (timedelta(hours=20), timedelta(hours=20, minutes=6))
"""Prometheus answers nothing: every gate is inconclusive."""
QUIET = (
    (timedelta(hours=3), timedelta(hours=3, minutes=20)),
    (timedelta(hours=27), timedelta(hours=27, minutes=20)),
)
"""Night-time traffic too thin for the timeouts gate's ``min_samples``."""


@dataclass(frozen=True)
class Bake:
    """The rollout :func:`build_bake` made."""

    rollout_id: int
    inserted: int
    rolled_back_at: datetime


@dataclass(frozen=True)
class _Store:
    """What :class:`tests.twins.Leader` needs of a store: its sessions."""

    sessions: sessionmaker[Session]


def build_bake(sessions: sessionmaker[Session], evaluations: int = EVALUATIONS) -> Bake:
    """A canary at 5% baking for 48 h with six gates, started and verified by a leader on the
    memory twins, then ``evaluations`` evaluations spread over the bake (every gate every
    ~5 s, mostly passing, inconclusive through a metrics outage and quiet nights), the last of
    them an OOM that breaches, the rollback it started, and the rollout rolled back."""
    plan = memory_plan(
        name="atlas-bake",
        gate="",
        gates={
            name: (
                {"kind": "threshold", "signal": signal, "max": limit, "min_samples": 100}
                if counted
                else {"kind": "events", "signal": signal}
            )
            for name, (signal, _, limit, counted) in GATES.items()
        },
        steps=[
            {"kind": "canary", "weight": 5, "bake": "48h", "gates": list(STEP_GATES)},
            {"kind": "canary", "weight": 25, "bake": "48h", "gates": list(STEP_GATES)},
            {"kind": "full"},
        ],
        triggers=TRIGGERS,
    )
    leader = Leader(_Store(sessions), plan, start=T0)
    for signal, typical, _, counted in GATES.values():
        for pool in ("canary", "stable"):
            leader.metrics.set(signal, pool, typical, samples=5000 if counted else None)
    leader.tick()
    leader.tick(seconds=5)  # the router reads 5%: the bake starts
    begin = leader.clock() + timedelta(seconds=10)
    rows = _evaluations(leader.rollout_id, begin, evaluations)
    batch: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    with sessions.begin() as session:
        for last in rows:
            batch.append(last)
            if len(batch) == BATCH:
                session.execute(insert(GateEvaluation.__table__), batch)
                batch = []
        if batch:
            session.execute(insert(GateEvaluation.__table__), batch)
    assert last["gate"] == BREACHING and last["verdict"] == "breach"
    _roll_back(sessions, leader.rollout_id, last)
    return Bake(leader.rollout_id, evaluations, last["evaluated_at"])


def _evaluations(rollout_id: int, begin: datetime, count: int) -> Iterator[dict[str, Any]]:
    """``count`` rows, one tick of every gate at a time over the bake; the last tick may be
    partial and ends with the breaching gate."""
    ticks = math.ceil(count / len(GATES))
    every = (BAKE - timedelta(minutes=1)) / max(ticks - 1, 1)
    partial = count - (ticks - 1) * len(GATES)
    noise = random.Random(7)
    for tick in range(ticks):
        at = begin + tick * every
        since = at - begin
        gates = list(GATES) if tick < ticks - 1 else list(GATES)[:partial][::-1]
        for gate in gates:
            yield _evaluation(rollout_id, gate, at, since, noise, final=tick == ticks - 1)


def _evaluation(
    rollout_id: int,
    gate: str,
    at: datetime,
    since: timedelta,
    noise: random.Random,
    *,
    final: bool,
) -> dict[str, Any]:
    signal, typical, limit, counted = GATES[gate]
    daily = 1 + 0.3 * math.sin(2 * math.pi * since / timedelta(hours=24))
    requests = round(40 * daily * (0.9 + 0.2 * noise.random()), 2)
    samples: int | None = int(requests * 300) if counted else None
    value: float | None = round(typical * daily * (0.8 + 0.4 * noise.random()), 6)
    verdict, reason = "pass", None
    if OUTAGE[0] <= since < OUTAGE[1]:
        verdict, value, samples = "inconclusive", None, None
        reason = f"query failed: prometheus answered 503 Service Unavailable for {signal}"
    elif gate == "timeouts" and any(start <= since < end for start, end in QUIET):
        samples = 80
        verdict, reason = "inconclusive", "too few samples: 80 of the 100 the gate needs"
    elif gate == BREACHING and final:
        verdict, value, reason = "breach", 1.0, "1 OOM event on c0 in the last 5m"
    evidence: dict[str, Any] = {"signal": signal, "pool": "canary", "raw": {}}
    if counted:
        evidence["load"] = {
            "canary": {"requests_per_s": requests, "inflight": round(requests / 8, 2)},
            "stable": {
                "requests_per_s": round(requests * 19, 2),
                "inflight": round(requests * 2.4, 2),
            },
            "ratio": round(1 / 19, 6),
            "basis": "requests_per_s",
            "planned_ratio": 0.05263157894736842,
            "window_seconds": 300.0,
        }
    else:
        evidence["replicas"] = {"c0": value or 0.0}
        evidence["window_seconds"] = 300.0
    return {
        "rollout_id": rollout_id,
        "step_index": 0,
        "gate": gate,
        "role": "trigger" if gate in TRIGGERS else "step",
        "verdict": verdict,
        "value": value,
        "threshold": f"<= {limit:g}" if counted else f"<= {limit:g} events",
        "query": f"memory:{signal}",
        "samples": samples,
        "statistic": None,
        "reason": reason,
        "evidence": evidence,
        "evaluated_at": at,
    }


def _roll_back(sessions: sessionmaker[Session], rollout_id: int, breach: dict[str, Any]) -> None:
    """What the leader writes when the breach rolls the canary back, and when the router then
    reads 0%: the two events and the ended progress."""
    at: datetime = breach["evaluated_at"]
    done = at + timedelta(seconds=5)
    cause = f"gate {BREACHING} breached: {breach['reason']}"
    with sessions.begin() as session:
        queries.append_event(
            session,
            rollout_id=rollout_id,
            kind="rollback_started",
            actor="rolloutd",
            detail=f"rollback started: {cause}",
            data={
                "step": 0,
                "step_name": "canary 5%",
                "cause": "trigger",
                "gate": BREACHING,
                "value": breach["value"],
                "threshold": breach["threshold"],
            },
            now=at,
        )
        queries.append_event(
            session,
            rollout_id=rollout_id,
            kind="rolled_back",
            actor="rolloutd",
            detail="rollback finished: the router reads 0% canary",
            now=done,
        )
        rollout = queries.get_rollout(session, rollout_id)
        progress = Progress.from_storage(rollout.progress)
        assert progress.desired is not None
        progress = replace(
            progress.stop_clock(at),
            rollback=RollbackFacts(cause, at, BREACHING, "weight", (), "trigger"),
            desired=progress.desired.changed_to(0, False),
            ended="rolled_back",
            ended_at=done,
        )
        queries.save_progress(
            session,
            rollout,
            progress=progress.for_storage(),
            state="rolled_back",
            active=False,
            now=done,
        )


# -- the report ------------------------------------------------------------------------------


def _stored(session: Session, rollout_id: int) -> dict[str, list[Any]]:
    """Every evaluation's id, verdict, step and time, by gate, oldest first."""
    found: dict[str, list[Any]] = {}
    for row in session.execute(
        select(
            GateEvaluation.id,
            GateEvaluation.gate,
            GateEvaluation.verdict,
            GateEvaluation.step_index,
            GateEvaluation.evaluated_at,
        )
        .where(GateEvaluation.rollout_id == rollout_id)
        .order_by(GateEvaluation.evaluated_at, GateEvaluation.id)
    ):
        found.setdefault(row.gate, []).append(row)
    return found


def _changes(rows: list[Any]) -> set[int]:
    """The ids of the evaluations whose verdict differs from the one before (and the first)."""
    return {row.id for i, row in enumerate(rows) if i == 0 or rows[i - 1].verdict != row.verdict}


def _drawn(html: str) -> dict[str, list[int]]:
    """The ids of the markers drawn in each gate's section of the page."""
    sections = re.findall(r'<section [^>]*data-gate="([^"]+)"[^>]*>(.*?)</section>', html, re.S)
    return {gate: [int(i) for i in re.findall(r'data-id="(\d+)"', body)] for gate, body in sections}


@pytest.mark.slow
def test_a_48_hour_bake_reports_every_verdict_change_in_few_points(
    store: StoreHandle, tmp_path: Path
) -> None:
    """The report of 200,000 evaluations stays under 5 MB, draws at most MAX_POINTS per gate
    besides the decisive ones, among them every verdict change and the ringed evaluation the
    rollback acted on; ``rolloutctl report --html`` writes the same page."""
    bake = build_bake(store.sessions)
    now = bake.rolled_back_at + timedelta(hours=1)
    with store.sessions() as session:
        stored = _stored(session, bake.rollout_id)
        decisions = list(
            session.scalars(
                select(Event.at).where(
                    Event.rollout_id == bake.rollout_id, Event.kind.in_(DECISIVE_EVENTS)
                )
            )
        )
        html = rollout_html(session, bake.rollout_id, now=now, report=True)
        document = rollout_json(session, bake.rollout_id, now=now)
    (decider,) = [row.id for row in stored[BREACHING] if row.verdict == "breach"]

    size = len(html.encode())
    assert size < 5_000_000
    drawn = _drawn(html)
    assert set(drawn) == set(GATES)
    assert sum(len(rows) for rows in stored.values()) >= EVALUATIONS
    for gate, rows in stored.items():
        changes = _changes(rows)
        # The newest evaluation of the gate when the rollback started is decisive too.
        decisive = changes | {rows[-1].id}
        assert len(drawn[gate]) == len(set(drawn[gate])), gate
        assert len(drawn[gate]) <= MAX_POINTS + len(decisive), gate
        assert len(drawn[gate]) < len(rows) / 20, gate
        assert changes <= set(drawn[gate]), gate
        assert len(changes) >= 3, gate
        # What the state machine saw at each decision, and the newest of each step.
        decided = {
            max((r for r in rows if r.evaluated_at <= at), key=lambda r: (r.evaluated_at, r.id)).id
            for at in decisions
            if rows[0].evaluated_at <= at
        }
        newest_of_step = {r.step_index: r.id for r in rows}
        assert decided | set(newest_of_step.values()) <= set(drawn[gate]), gate
    assert decider in drawn[BREACHING]
    ringed = re.findall(r'<circle class="([^"]*)"[^>]*data-id="(\d+)"', html)
    assert [int(i) for classes, i in ringed if "decided" in classes.split()] == [decider]

    points = {g["name"]: g["points"] for g in document["gates"]}
    assert {gate: [p["id"] for p in found] for gate, found in points.items()} == drawn
    marked = [p["id"] for found in points.values() for p in found if p["decided_rollback"]]
    assert marked == [decider]

    target = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli,
        ["report", str(bake.rollout_id), "--html", str(target)],
        env={"ROLLOUTD_DATABASE_URL": store.url, "ROLLOUTD_ENV_FILE": "/nonexistent"},
    )
    assert result.exit_code == 0, result.output
    assert target.stat().st_size == size
