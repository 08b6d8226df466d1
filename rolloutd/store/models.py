"""The tables, as SQLAlchemy 2 declarative models that run unchanged on Postgres and SQLite.

The rollout row keeps the progress *facts* the state machine wrote (``progress``) and a
``revision`` for optimistic concurrency; the phase is derived from those facts, never trusted.
Everything else is append-mostly history (events, gate evaluations, commands) or an intent log
(actions) that a restarted daemon replays.

Timestamps are :class:`~rolloutd.store.timestamps.UTCDateTime` and have no server defaults: the
caller passes ``now`` so that tests can drive the clock. Constraint names come from the naming
convention below, so later migrations (batch mode on SQLite) can address them by name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, TypeAlias

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Double,
    FetchedValue,
    ForeignKey,
    Index,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rolloutd.store.timestamps import UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

COMMAND_KINDS = ("promote", "abort", "pause", "resume")
COMMAND_STATUSES = ("pending", "applied", "rejected")
ACTION_STATUSES = ("pending", "done", "failed", "superseded")
GATE_ROLES = ("step", "trigger", "step+trigger")
"""What an evaluation was for: a step's gate, a rollback trigger, or both at once (a gate of the
step that is also a trigger is judged once a tick, and that verdict decides both)."""
ENGINES = ("trtllm", "vllm")


PrimaryKey: TypeAlias = Annotated[int, mapped_column(primary_key=True, autoincrement=True)]
"""An integer key the database numbers."""

RolloutRef: TypeAlias = Annotated[int, mapped_column(ForeignKey("rollouts.id"))]
"""The rollout a row belongs to."""

Sha256: TypeAlias = Annotated[str, mapped_column(String(64))]
"""A sha256 digest in hex: of a plan, an artefact set or a suite's bytes."""


def one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    """A check that ``column`` holds one of ``values``, named after the column."""
    allowed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=column)


def unique_where(name: str, *columns: str, where: str) -> Index:
    """A unique index over ``columns`` of the rows where ``where`` holds (a partial index,
    written alike for Postgres and SQLite)."""
    return Index(
        name, *columns, unique=True, postgresql_where=text(where), sqlite_where=text(where)
    )


class Base(DeclarativeBase):
    """Declarative base carrying the shared metadata, naming convention and column types.

    A column names its type only where the Python type does not say it all: a string with a
    length limit is ``String(n)``, any other ``str`` is ``Text``.
    """

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UTCDateTime,
        float: Double,
        str: Text,
        dict[str, Any]: JSON,
        list[str]: JSON,
        list[dict[str, Any]]: JSON,
    }


class Rollout(Base):
    """One rollout of one plan to one service in one environment."""

    __tablename__ = "rollouts"
    __table_args__ = (
        # At most one active rollout per service and environment, enforced by the database so
        # that two operators starting rollouts at the same moment cannot both succeed.
        unique_where(
            "uq_rollouts_active_service_environment", "service", "environment", where="active"
        ),
    )

    id: Mapped[PrimaryKey]
    name: Mapped[str] = mapped_column(String(200))
    service: Mapped[str] = mapped_column(String(200))
    environment: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(40), index=True)
    active: Mapped[bool]
    plan_hash: Mapped[Sha256]
    plan_source: Mapped[str]
    plan_path: Mapped[str]
    steps: Mapped[int]
    """How many steps the plan has: what a view numbers "step 2 of 6" against, without
    parsing the plan."""
    plan_outline: Mapped[dict[str, Any] | None]
    """What the views show of the plan (:class:`rolloutd.core.outline.PlanOutline`); none for
    rollouts started before outlines were stored."""
    progress: Mapped[dict[str, Any]]
    revision: Mapped[int]
    created_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    def __repr__(self) -> str:
        return (
            f"Rollout(id={self.id!r}, service={self.service!r}, "
            f"environment={self.environment!r}, state={self.state!r}, revision={self.revision!r})"
        )


class StepProgress(Base):
    """When each step of a rollout was entered, verified on the router, and completed."""

    __tablename__ = "step_progress"

    rollout_id: Mapped[RolloutRef] = mapped_column(primary_key=True)
    step_index: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(40))
    weight: Mapped[float]
    entered_at: Mapped[datetime | None]
    verified_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]


class GateEvaluation(Base):
    """One verdict of one gate (or rollback trigger) at one tick, with its evidence."""

    __tablename__ = "gate_evaluations"
    __table_args__ = (
        Index(None, "rollout_id", "gate", "evaluated_at"),
        one_of("role", GATE_ROLES),
    )

    id: Mapped[PrimaryKey]
    rollout_id: Mapped[RolloutRef]
    step_index: Mapped[int]
    gate: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    verdict: Mapped[str] = mapped_column(String(40))
    value: Mapped[float | None]
    threshold: Mapped[str | None] = mapped_column(String(200))
    query: Mapped[str | None]
    samples: Mapped[int | None]
    statistic: Mapped[float | None]
    reason: Mapped[str | None]
    evidence: Mapped[dict[str, Any]]
    evaluated_at: Mapped[datetime]


class Command(Base):
    """An operator's request (promote, abort, pause, resume), applied or rejected by the leader."""

    __tablename__ = "commands"
    __table_args__ = (
        Index(None, "rollout_id", "status"),
        one_of("kind", COMMAND_KINDS),
        one_of("status", COMMAND_STATUSES),
    )

    id: Mapped[PrimaryKey]
    rollout_id: Mapped[RolloutRef]
    kind: Mapped[str] = mapped_column(String(20))
    args: Mapped[dict[str, Any]]
    actor: Mapped[str] = mapped_column(String(200))
    """Who ``rolloutctl`` says is acting (``SUDO_USER`` or the OS user): claimed, not proven."""
    db_role: Mapped[str | None] = mapped_column(String(200), server_default=FetchedValue())
    """The database role that inserted the row, written by the database itself on Postgres
    (migration 0013: a default and a trigger, so no client can choose it); NULL on SQLite."""
    reason: Mapped[str | None]
    created_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(20))
    handled_at: Mapped[datetime | None]
    outcome: Mapped[str | None]


class Event(Base):
    """One line of the audit log; ``rollout_id`` is null for daemon-level events."""

    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("rollout_id", "dedup_key"),
        # NULLs are distinct in a unique constraint, so daemon-level events (no rollout) need
        # their own index to be deduplicated too.
        unique_where("uq_events_daemon_dedup_key", "dedup_key", where="rollout_id IS NULL"),
        Index(None, "rollout_id", "at"),
    )

    id: Mapped[PrimaryKey]
    rollout_id: Mapped[RolloutRef | None]
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(60))
    actor: Mapped[str] = mapped_column(String(200))
    detail: Mapped[str]
    data: Mapped[dict[str, Any]]
    dedup_key: Mapped[str | None] = mapped_column(String(200))


class Action(Base):
    """A side effect written as pending before it runs and marked done after (the intent log)."""

    __tablename__ = "actions"
    __table_args__ = (
        UniqueConstraint("rollout_id", "key"),
        Index(None, "status", "created_at"),
        one_of("status", ACTION_STATUSES),
    )

    id: Mapped[PrimaryKey]
    rollout_id: Mapped[RolloutRef]
    key: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(60))
    payload: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(20))
    attempts: Mapped[int]
    last_error: Mapped[str | None]
    created_at: Mapped[datetime]
    done_at: Mapped[datetime | None]
    next_attempt_at: Mapped[datetime | None]
    """After a failed attempt: not before this wall-clock time (exponential backoff)."""


class ArtefactSet(Base):
    """A pinned set of engine artefacts (config + files with digests) that a replica can run."""

    __tablename__ = "artefact_sets"
    __table_args__ = (one_of("engine", ENGINES),)

    id: Mapped[PrimaryKey]
    name: Mapped[str] = mapped_column(String(200), unique=True)
    engine: Mapped[str] = mapped_column(String(20))
    engine_config: Mapped[dict[str, Any]]
    files: Mapped[list[dict[str, Any]]]
    digest: Mapped[Sha256]
    root: Mapped[str]
    created_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]


class Lease(Base):
    """Leadership: one row per lease name, its holder, expiry and fencing epoch.

    The epoch grows by one on every change of holder; every state write of the leader
    carries ``epoch = mine AND expires_at > now`` in its WHERE clause (see
    :func:`rolloutd.store.lease.fence`), so a leader that was paused past its lease cannot
    write once another process took over.
    """

    __tablename__ = "leases"
    # The epoch is a key: a takeover's UPDATE (a new epoch) then conflicts with the FOR KEY
    # SHARE lock every leader write holds, while a renewal (the expiry only) does not.
    __table_args__ = (Index(None, "name", "epoch", unique=True),)

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    epoch: Mapped[int]
    expires_at: Mapped[datetime]
    renewed_at: Mapped[datetime]


# The tables of the suite runner, the deploy executors and the alert outbox live in modules of
# their own; importing them here puts them on ``Base.metadata`` for migrations and drift checks.
from rolloutd.store import artefact_models, outbox_models, suite_models  # noqa: E402, F401
