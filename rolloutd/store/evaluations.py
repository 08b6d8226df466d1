"""Gate evaluations: every verdict the analysis produced, with the evidence behind it.

The state machine asks for the newest verdict of each gate; trend checks ask for a gate's recent
values. Both read an index on ``(rollout_id, gate, evaluated_at)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypedDict, TypeVar, Unpack, cast

from sqlalchemy import ColumnElement, Select, Table, bindparam, func, insert, select, union_all
from sqlalchemy.orm import Session

from rolloutd.store.db import count_driver_round_trip
from rolloutd.store.models import GateEvaluation, Rollout
from rolloutd.store.timestamps import as_utc
from rolloutd.store.writes import add_row

_T = TypeVar("_T")

GateRole = Literal["step", "trigger", "step+trigger"]
"""What an evaluation was for (``rolloutd.store.models.GATE_ROLES``); :func:`roles_of` splits it."""


def roles_of(role: str) -> list[str]:
    """The roles a stored ``role`` names: ``step+trigger`` is both."""
    return role.split("+")


class NewEvaluation(TypedDict):
    """One verdict of one gate at one step, with the measurement and evidence behind it."""

    rollout_id: int
    step_index: int
    gate: str
    role: GateRole
    verdict: str
    value: float | None
    threshold: str | None
    query: str | None
    samples: int | None
    statistic: float | None
    reason: str | None
    evidence: dict[str, Any]
    evaluated_at: datetime


def record_evaluation(session: Session, **evaluation: Unpack[NewEvaluation]) -> int:
    """Store one gate verdict and return its id."""
    return add_row(session, GateEvaluation(**evaluation)).id


_TABLE = cast(Table, GateEvaluation.__table__)


def record_evaluations(session: Session, evaluations: Sequence[NewEvaluation]) -> None:
    """Store a batch's verdicts in one round trip. On Postgres, by COPY on the driver's
    connection, in the session's transaction: SQLAlchemy's per-row parameter processing of
    an executemany cost more than the rest of a baking tick (25 µs of CPU a row against
    7). Elsewhere, one executemany of a Core insert."""
    if not evaluations:
        return
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        session.execute(insert(_TABLE), list(evaluations))
        return
    driver = connection.connection.driver_connection
    assert driver is not None  # a connection in a transaction has its driver's
    with driver.cursor() as cursor, cursor.copy(_COPY) as copy:
        for row in evaluations:
            columns: Mapping[str, object] = row
            values = [columns[name] for name in _COPIED]
            values.append(json.dumps(row["evidence"]))
            values.append(as_utc(row["evaluated_at"]))
            copy.write_row(values)
    count_driver_round_trip(connection)


# The columns COPY fills, in its order: those passed as they are, then the evidence (as JSON
# text) and the time.
_COPIED = tuple(c for c in NewEvaluation.__annotations__ if c not in ("evidence", "evaluated_at"))
_COPY = f"COPY gate_evaluations ({', '.join(_COPIED)}, evidence, evaluated_at) FROM STDIN"


class Newest(NamedTuple):
    """What the state machine reads of a gate's newest evaluation."""

    id: int
    gate: str
    step_index: int
    verdict: str
    evaluated_at: datetime
    reason: str | None
    value: float | None
    threshold: str | None
    samples: int | None


def newest_evaluations(
    session: Session, rollout_id: int, wanted: Iterable[tuple[str, int | None]]
) -> list[Newest]:
    """The newest evaluation of each ``(gate, step)`` wanted (step None: of any step), in one
    statement of one index lookup a gate, however many evaluations the rollout has."""
    wanted = list(wanted)
    if not wanted:
        return []
    params: dict[str, Any] = {"rollout_id": rollout_id}
    for i, (gate, step) in enumerate(wanted):
        params[f"gate_{i}"] = gate
        if step is not None:
            params[f"step_{i}"] = step
    statement = _newest_statement(tuple(step is not None for _, step in wanted))
    return [Newest(*row) for row in session.execute(statement, params)]


@lru_cache(maxsize=256)
def _newest_statement(by_step: tuple[bool, ...]) -> Select[Any]:
    """The statement for ``newest_evaluations``, built once per shape (ticks ask the same
    gates every time): building SQLAlchemy expressions costs more than running them."""
    newest_first = (GateEvaluation.evaluated_at.desc(), GateEvaluation.id.desc())
    ids = []
    for i, step in enumerate(by_step):
        query = select(GateEvaluation.id).where(
            GateEvaluation.rollout_id == bindparam("rollout_id"),
            GateEvaluation.gate == bindparam(f"gate_{i}"),
        )
        if step:
            query = query.where(GateEvaluation.step_index == bindparam(f"step_{i}"))
        ids.append(query.order_by(*newest_first).limit(1).scalar_subquery())
    columns = [getattr(GateEvaluation, name) for name in Newest._fields]
    return select(*columns).where(GateEvaluation.id.in_(ids))


class GateLatest(NamedTuple):
    """What rolloutd's ``/metrics`` shows of a gate's newest evaluation."""

    rollout_id: int
    gate: str
    role: str
    verdict: str
    value: float | None
    evaluated_at: datetime


# Correlated lookups in one statement's select list, and values in one IN list, at the most.
_GATES_A_STATEMENT = 64
_IDS_A_STATEMENT = 5_000


def latest_of_rollouts(
    session: Session,
    gates: Mapping[int, Iterable[str]],
    *,
    among: ColumnElement[bool] | None = None,
) -> dict[int, dict[str, GateLatest]]:
    """The newest evaluation of each gate of each rollout (``gates``: rollout id -> the
    plan's gate names), by rollout and gate.

    One index lookup a rollout and gate, as in :func:`newest_evaluations`, but correlated
    with the rollouts table: the number of statements follows the number of distinct gate
    names and the thousands of rollouts, not the rollouts one by one. ``among``, a condition
    on the rollouts table that selects the rollouts of ``gates`` (a scrape's visible ones),
    replaces their ids in the statements: at 10,000 rollouts, sending 70,000 ids as
    parameters cost more than the lookups. A rollout it selects that ``gates`` lacks (one
    that became visible since they were read) is left out.
    """
    wanted = {rollout_id: set(names) for rollout_id, names in gates.items()}
    names = sorted(set().union(*wanted.values()))
    e = GateEvaluation
    newest_first = (e.evaluated_at.desc(), e.id.desc())
    selections: list[ColumnElement[bool]]
    if among is None:
        selections = [Rollout.id.in_(ids) for ids in _chunks(list(wanted), _IDS_A_STATEMENT)]
    else:
        selections = [among]
    latest: dict[int, dict[str, GateLatest]] = {rollout_id: {} for rollout_id in wanted}
    columns = [getattr(e, name) for name in GateLatest._fields]
    for some in _chunks(names, _GATES_A_STATEMENT):
        for selected in selections:
            lookups = [
                select(
                    select(e.id)
                    .where(e.rollout_id == Rollout.id, e.gate == name)
                    .order_by(*newest_first)
                    .limit(1)
                    .correlate(Rollout)
                    .scalar_subquery()
                ).where(selected)
                for name in some
            ]
            newest = union_all(*lookups) if len(lookups) > 1 else lookups[0]
            for row in session.execute(select(*columns).where(e.id.in_(newest))):
                if row.gate in wanted.get(row.rollout_id, ()):
                    latest[row.rollout_id][row.gate] = GateLatest._make(row)
    return latest


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def latest_evaluations(
    session: Session,
    rollout_id: int,
    *,
    step_index: int | None = None,
    gates: Iterable[str] | None = None,
) -> dict[str, GateEvaluation]:
    """Return the newest evaluation of each gate of the rollout, by gate name.

    With ``step_index``, only evaluations made during that step count. With ``gates`` (the
    plan's), one index lookup a gate; without, every evaluation of the rollout is ranked,
    which only one-off reads may afford (a 48 h bake stores some 200,000).
    """
    if gates is not None:
        found = newest_evaluations(session, rollout_id, [(g, step_index) for g in gates])
        if not found:
            return {}
        chosen = select(GateEvaluation).where(GateEvaluation.id.in_([row.id for row in found]))
        return {row.gate: row for row in session.scalars(chosen)}
    newest_first = (GateEvaluation.evaluated_at.desc(), GateEvaluation.id.desc())
    ranked = select(
        GateEvaluation.id,
        func.row_number()
        .over(partition_by=GateEvaluation.gate, order_by=newest_first)
        .label("rank"),
    ).where(GateEvaluation.rollout_id == rollout_id)
    if step_index is not None:
        ranked = ranked.where(GateEvaluation.step_index == step_index)
    newest = ranked.subquery()
    rows = session.scalars(
        select(GateEvaluation)
        .join(newest, GateEvaluation.id == newest.c.id)
        .where(newest.c.rank == 1)
    )
    return {row.gate: row for row in rows}


def recent_values(session: Session, rollout_id: int, gate: str, limit: int) -> list[float | None]:
    """Return the values of the gate's ``limit`` most recent evaluations, newest first.

    None stands for an evaluation that produced no value (an inconclusive query).
    """
    return list(
        session.scalars(
            select(GateEvaluation.value)
            .where(GateEvaluation.rollout_id == rollout_id, GateEvaluation.gate == gate)
            .order_by(GateEvaluation.evaluated_at.desc(), GateEvaluation.id.desc())
            .limit(limit)
        )
    )
