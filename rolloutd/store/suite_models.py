"""The tool-argument suite's tables: runs, per-case and per-field results.

A *job* is a suite run the leader decided is due: a keyed, leased row (``acquired_by``,
``acquired_until``), so that exactly one instance asks the engines at a time and a new leader
takes over a job whose holder went away. A run is one suite asked of one endpoint (the canary
or the baseline build), with the digest of the suite's bytes so that only runs of the same
cases are ever paired. Cases and
fields are kept whole, so a gate's verdict can be rechecked, and a field that regressed can
be traced to the cases and the values the engine sent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from rolloutd.store.models import Base
from rolloutd.store.timestamps import UTCDateTime

SUITE_RUN_ROLES = ("canary", "baseline")
SUITE_JOB_STATES = ("open", "done", "failed", "superseded")
CASE_OUTCOMES = (
    "correct",
    "format",
    "wrong_value",
    "schema_violation",
    "wrong_tool",
    "no_call",
    "request_error",
)
FIELD_OUTCOMES = ("correct", "format", "wrong_value", "missing", "extra")


def _one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    allowed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=column)


class SuiteJob(Base):
    """A due run of a rollout's suite gate, and who runs it until when.

    ``acquired_until`` is on the wall clock (like the leader lease) and moves forward while
    the holder runs the job under its lease; ``attempts`` counts the claims, so a holder's
    writes can check that the job is still its own. At most one job per rollout and gate is
    ``open``.
    """

    __tablename__ = "suite_jobs"
    __table_args__ = (
        Index(
            "uq_suite_jobs_open",
            "rollout_id",
            "gate",
            unique=True,
            postgresql_where=text("state = 'open'"),
            sqlite_where=text("state = 'open'"),
        ),
        Index(None, "rollout_id", "gate", "step_index"),
        _one_of("state", SUITE_JOB_STATES),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id"))
    gate: Mapped[str] = mapped_column(String(200))
    step_index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20))
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)
    acquired_by: Mapped[str | None] = mapped_column(String(200))
    acquired_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str | None] = mapped_column(Text)


class SuiteRun(Base):
    """One run of a suite against one endpoint; ``rollout_id`` is null for ad-hoc runs."""

    __tablename__ = "suite_runs"
    __table_args__ = (
        Index(None, "rollout_id", "gate", "role", "finished_at"),
        _one_of("role", SUITE_RUN_ROLES),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int | None] = mapped_column(ForeignKey("rollouts.id"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("suite_jobs.id"))
    step_index: Mapped[int | None] = mapped_column(Integer)
    gate: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    suite_path: Mapped[str] = mapped_column(Text)
    suite_sha256: Mapped[str] = mapped_column(String(64))
    endpoint: Mapped[str] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    seed: Mapped[int | None] = mapped_column(Integer)
    concurrency: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime)
    cases: Mapped[int] = mapped_column(Integer)
    measured: Mapped[int] = mapped_column(Integer)
    exact: Mapped[int] = mapped_column(Integer)
    strict_exact: Mapped[int] = mapped_column(Integer)
    schema_violations: Mapped[int] = mapped_column(Integer)
    tool_calls: Mapped[int] = mapped_column(Integer)
    request_errors: Mapped[int] = mapped_column(Integer)
    exactness: Mapped[float | None] = mapped_column(Double)
    strict_exactness: Mapped[float | None] = mapped_column(Double)
    outcomes: Mapped[dict[str, Any]] = mapped_column(JSON)


class SuiteCaseResult(Base):
    """One case of one run: its outcome, both scores, and what the engine sent."""

    __tablename__ = "suite_case_results"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id"),
        _one_of("outcome", CASE_OUTCOMES),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("suite_runs.id"))
    case_id: Mapped[str] = mapped_column(String(200))
    position: Mapped[int] = mapped_column(Integer)
    expected_tool: Mapped[str] = mapped_column(String(200))
    tool: Mapped[str | None] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(30))
    exact: Mapped[bool | None] = mapped_column(Boolean)
    strict: Mapped[bool | None] = mapped_column(Boolean)
    schema_valid: Mapped[bool | None] = mapped_column(Boolean)
    arguments: Mapped[str | None] = mapped_column(Text)
    schema_errors: Mapped[list[str]] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer)
    latency_s: Mapped[float | None] = mapped_column(Double)


class SuiteFieldResult(Base):
    """One argument of one case of one run; values are kept as JSON text, types intact."""

    __tablename__ = "suite_field_results"
    __table_args__ = (
        Index(None, "run_id", "field"),
        _one_of("outcome", FIELD_OUTCOMES),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    case_result_id: Mapped[int] = mapped_column(ForeignKey("suite_case_results.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("suite_runs.id"))
    field: Mapped[str] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(20))
    schema_valid: Mapped[bool] = mapped_column(Boolean)
    strict_correct: Mapped[bool] = mapped_column(Boolean)
    expected: Mapped[str | None] = mapped_column(Text)
    actual: Mapped[str | None] = mapped_column(Text)
