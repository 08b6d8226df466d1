"""What ``rolloutctl status`` and ``rolloutctl list`` read, in SQLAlchemy Core, without the ORM.

Those commands read a few rows and print them. Importing the ORM and mapping every table costs
more than the rest of such a command's run (``bench/cli_start.py`` measures it), so these
statements name the columns they read on light table clauses instead of the models. The types
are the models' own, so values come back as the ORM would hand them (aware UTC times, parsed
JSON); ``tests/store/test_reads.py`` holds each clause to its model, column by column.

Every function takes a Core ``Connection`` or an ORM ``Session`` (in whose transaction the
statement then runs): the views in :mod:`rolloutd.operations` serve both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import JSON, Boolean, Double, Integer, String, Text, column, select, table

from rolloutd.errors import NotFound
from rolloutd.store.timestamps import UTCDateTime

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

ROLLOUTS = table(
    "rollouts",
    column("id", Integer),
    column("name", String),
    column("service", String),
    column("environment", String),
    column("active", Boolean),
    column("plan_hash", String),
    column("plan_source", Text),
    column("steps", Integer),
    column("plan_outline", JSON),
    column("progress", JSON),
    column("created_by", String),
    column("created_at", UTCDateTime),
    column("updated_at", UTCDateTime),
)
STEPS = table(
    "step_progress",
    column("rollout_id", Integer),
    column("step_index", Integer),
    column("name", String),
)
EVALUATIONS = table(
    "gate_evaluations",
    column("id", Integer),
    column("rollout_id", Integer),
    column("step_index", Integer),
    column("gate", String),
    column("verdict", String),
    column("value", Double),
    column("threshold", String),
    column("reason", Text),
    column("evidence", JSON),
    column("evaluated_at", UTCDateTime),
)

LEASES = table(
    "leases",
    column("name", String),
    column("holder", String),
    column("expires_at", UTCDateTime),
    column("renewed_at", UTCDateTime),
)
LEADER_LEASE = "leader"
"""The name of the lease whose holder drives every rollout."""


class RolloutRow(NamedTuple):
    """A rollout as the views show it: what it runs, where, and the progress facts."""

    id: int
    name: str
    service: str
    environment: str
    plan_hash: str
    plan_source: str
    steps: int
    plan_outline: dict[str, Any] | None
    progress: dict[str, Any]
    created_by: str
    created_at: datetime
    updated_at: datetime


class EvaluationRow(NamedTuple):
    """A gate's verdict as the views show it, with its evidence."""

    gate: str
    verdict: str
    value: float | None
    threshold: str | None
    reason: str | None
    evidence: dict[str, Any]
    evaluated_at: datetime


_ROLLOUT_COLUMNS = [ROLLOUTS.c[name] for name in RolloutRow._fields]
_EVALUATION_COLUMNS = [EVALUATIONS.c[name] for name in EvaluationRow._fields]


def get_rollout(db: Connection | Session, rollout_id: int) -> RolloutRow:
    """Return rollout ``rollout_id``.

    :raises NotFound: when there is no such rollout.
    """
    query = select(*_ROLLOUT_COLUMNS).where(ROLLOUTS.c.id == rollout_id)
    row = db.execute(query).first()
    if row is None:
        raise NotFound(f"no rollout {rollout_id}")
    return RolloutRow._make(row)


def list_rollouts(
    db: Connection | Session, *, active_only: bool = False, limit: int = 50
) -> list[RolloutRow]:
    """Return up to ``limit`` rollouts, newest first."""
    query = select(*_ROLLOUT_COLUMNS).order_by(ROLLOUTS.c.created_at.desc(), ROLLOUTS.c.id.desc())
    if active_only:
        query = query.where(ROLLOUTS.c.active)
    return [RolloutRow._make(row) for row in db.execute(query.limit(limit))]


def step_names(db: Connection | Session, rollout_ids: Sequence[int]) -> dict[tuple[int, int], str]:
    """The name the daemon recorded for each step the rollouts entered, by (rollout, step)."""
    if not rollout_ids:
        return {}
    query = select(STEPS.c.rollout_id, STEPS.c.step_index, STEPS.c.name).where(
        STEPS.c.rollout_id.in_(rollout_ids)
    )
    return {(rollout_id, index): name for rollout_id, index, name in db.execute(query)}


def newest_evaluations(
    db: Connection | Session, rollout_id: int, wanted: Iterable[tuple[str, int | None]]
) -> dict[str, EvaluationRow]:
    """The newest evaluation of each ``(gate, step)`` wanted (step None: of any step), by gate,
    in one statement of one index lookup a gate, as
    :func:`rolloutd.store.evaluations.newest_evaluations` finds them."""
    e = EVALUATIONS.c
    newest = []
    for gate, step in wanted:
        query = select(e.id).where(e.rollout_id == rollout_id, e.gate == gate)
        if step is not None:
            query = query.where(e.step_index == step)
        newest.append(query.order_by(e.evaluated_at.desc(), e.id.desc()).limit(1).scalar_subquery())
    if not newest:
        return {}
    rows = db.execute(select(*_EVALUATION_COLUMNS).where(e.id.in_(newest)))
    return {row.gate: EvaluationRow._make(row) for row in rows}


class Leadership(NamedTuple):
    """Who drives the rollouts: the leader lease's holder and when it was last renewed."""

    holder: str | None  # None: no rolloutd has ever led on this database
    expires_at: datetime | None
    renewed_at: datetime | None

    def leading_at(self, now: datetime) -> bool:
        """Whether a rolloutd holds the lease at ``now``."""
        return self.expires_at is not None and now < self.expires_at


def leadership(db: Connection | Session) -> Leadership:
    """The leader lease as it stands (holder and expiry are the leader's clock)."""
    query = select(LEASES.c.holder, LEASES.c.expires_at, LEASES.c.renewed_at).where(
        LEASES.c.name == LEADER_LEASE
    )
    row = db.execute(query).first()
    return Leadership(None, None, None) if row is None else Leadership._make(row)
