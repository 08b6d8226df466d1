"""The suites' tables: jobs, runs, per-case and per-field results, and the judge's scores.

A *job* is an evaluation run the tick decided is due, under a deterministic name
(``rollout-3/tool_args/step-0/run-1``): a keyed, leased row (``acquired_by``,
``acquired_until``), so that exactly one instance asks the engines at a time and a new leader
takes over a job whose holder went away. While it runs, each case's result is kept as it
completes (:class:`SuiteJobCase`), so a job taken over continues with the cases that have
none; a job that samples live traffic keeps its sampled suite (:class:`SuiteSample`), so
every attempt, on any host, asks the same cases.

A run is one suite asked of one endpoint (the canary or the baseline build), with the digest
of the suite's bytes so that only runs of the same cases are ever paired. Cases and fields
are kept whole, so a gate's verdict can be rechecked, and a field that regressed can be traced
to the cases and the values the engine sent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from rolloutd.core.suite_outcomes import FIELD_OUTCOMES, STORED_CASE_OUTCOMES
from rolloutd.store.models import Base, PrimaryKey, RolloutRef, Sha256, one_of, unique_where

SUITE_RUN_ROLES = ("canary", "baseline")
SUITE_JOB_STATES = ("open", "done", "failed", "superseded", "cancelled")
SCORERS = ("exact", "token_f1", "judge")


class SuiteJob(Base):
    """A due run of a rollout's suite gate, and who runs it until when.

    ``name`` is the run's key (``rollout-{id}/{gate}/step-{n}/run-{k}``), unique, so that two
    writers, or a retried tick, cannot create the same run twice. ``acquired_until`` is on the
    wall clock (like the leader lease) and moves forward while the holder runs the job under
    its lease; ``attempts`` counts the claims, so a holder's writes can check that the job is
    still its own. At most one job per rollout and gate is ``open``.
    """

    __tablename__ = "suite_jobs"
    __table_args__ = (
        unique_where("uq_suite_jobs_open", "rollout_id", "gate", where="state = 'open'"),
        UniqueConstraint("name"),
        Index(None, "rollout_id", "gate", "step_index"),
        one_of("state", SUITE_JOB_STATES),
    )

    id: Mapped[PrimaryKey]
    name: Mapped[str] = mapped_column(String(300))
    rollout_id: Mapped[RolloutRef]
    gate: Mapped[str] = mapped_column(String(200))
    step_index: Mapped[int]
    state: Mapped[str] = mapped_column(String(20))
    due_at: Mapped[datetime]
    acquired_by: Mapped[str | None] = mapped_column(String(200))
    acquired_until: Mapped[datetime | None]
    attempts: Mapped[int]
    finished_at: Mapped[datetime | None]
    reason: Mapped[str | None]


class SuiteRun(Base):
    """One run of a suite against one endpoint; ``rollout_id`` is null for ad-hoc runs.

    ``scorer`` is set for a run of reference answers (how its answers were scored) and null
    for a run of tool calls: it says which of the two a run is.
    """

    __tablename__ = "suite_runs"
    __table_args__ = (
        Index(None, "rollout_id", "gate", "role", "finished_at"),
        one_of("role", SUITE_RUN_ROLES),
        one_of("scorer", SCORERS),
    )

    id: Mapped[PrimaryKey]
    rollout_id: Mapped[RolloutRef | None]
    job_id: Mapped[int | None] = mapped_column(ForeignKey("suite_jobs.id"))
    step_index: Mapped[int | None]
    gate: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    suite_path: Mapped[str]
    suite_sha256: Mapped[Sha256]
    endpoint: Mapped[str]
    model: Mapped[str | None] = mapped_column(String(200))
    seed: Mapped[int | None]
    concurrency: Mapped[int | None]
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]
    cases: Mapped[int]
    measured: Mapped[int]
    exact: Mapped[int]
    strict_exact: Mapped[int]
    schema_violations: Mapped[int]
    tool_calls: Mapped[int]
    request_errors: Mapped[int]
    exactness: Mapped[float | None]
    strict_exactness: Mapped[float | None]
    outcomes: Mapped[dict[str, Any]]
    scorer: Mapped[str | None] = mapped_column(String(20))


class SuiteCaseResult(Base):
    """One case of one run: its outcome, both scores, and what the engine sent.

    A reference case has no expected tool; it keeps the answer's text, its ``score`` in
    [0, 1] and, when the judge gave no usable score, the ``judge_error``.
    """

    __tablename__ = "suite_case_results"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id"),
        one_of("outcome", STORED_CASE_OUTCOMES),
    )

    id: Mapped[PrimaryKey]
    run_id: Mapped[int] = mapped_column(ForeignKey("suite_runs.id"))
    case_id: Mapped[str] = mapped_column(String(200))
    position: Mapped[int]
    expected_tool: Mapped[str | None] = mapped_column(String(200))
    tool: Mapped[str | None] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(30))
    exact: Mapped[bool | None]
    strict: Mapped[bool | None]
    schema_valid: Mapped[bool | None]
    arguments: Mapped[str | None]
    schema_errors: Mapped[list[str]]
    error: Mapped[str | None]
    attempts: Mapped[int]
    latency_s: Mapped[float | None]
    answer: Mapped[str | None]
    score: Mapped[float | None]
    judge_error: Mapped[str | None]


class JudgeScore(Base):
    """A score the LLM judge gave, by its cache key (``rolloutd.evaluation.judge.judge_key``:
    the sha256 of the judge's configuration, the case and the answer), so that an answer is
    judged once, whichever run or build gave it. Errors are not kept: they may pass next time.
    """

    __tablename__ = "judge_scores"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    score: Mapped[float]
    judged_at: Mapped[datetime]


class SuiteFieldResult(Base):
    """One argument of one case of one run; values are kept as JSON text, types intact."""

    __tablename__ = "suite_field_results"
    __table_args__ = (
        Index(None, "run_id", "field"),
        one_of("outcome", FIELD_OUTCOMES),
    )

    id: Mapped[PrimaryKey]
    case_result_id: Mapped[int] = mapped_column(ForeignKey("suite_case_results.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("suite_runs.id"))
    field: Mapped[str] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(20))
    schema_valid: Mapped[bool]
    strict_correct: Mapped[bool]
    expected: Mapped[str | None]
    actual: Mapped[str | None]


class SuiteJobCase(Base):
    """One case's result in a job's run, kept as it completes (the case's ``CaseResult`` as
    JSON), until the run is stored whole; keyed by the suite's digest, so a suite file that
    changed between attempts starts afresh."""

    __tablename__ = "suite_job_cases"
    __table_args__ = (
        UniqueConstraint("job_id", "suite_sha256", "role", "case_id"),
        one_of("role", SUITE_RUN_ROLES),
    )

    id: Mapped[PrimaryKey]
    job_id: Mapped[int] = mapped_column(ForeignKey("suite_jobs.id"))
    suite_sha256: Mapped[Sha256]
    role: Mapped[str] = mapped_column(String(20))
    case_id: Mapped[str] = mapped_column(String(200))
    position: Mapped[int]
    result: Mapped[dict[str, Any]]
    kept_at: Mapped[datetime]


class SuiteSample(Base):
    """The live traffic a job sampled as its cases: the suite (zlib-compressed JSONL, at most
    ``MAX_SUITE_BYTES`` before compression), or why there is none usable (``reason``), and
    what the sample kept and dropped (counts, tools and ``file:line`` problems; no content)."""

    __tablename__ = "suite_samples"
    __table_args__ = (UniqueConstraint("job_id"),)

    id: Mapped[PrimaryKey]
    job_id: Mapped[int] = mapped_column(ForeignKey("suite_jobs.id"))
    capture: Mapped[str]
    since: Mapped[datetime]
    until: Mapped[datetime]
    seed: Mapped[int]
    kept: Mapped[int]
    report: Mapped[dict[str, Any]]
    suite_sha256: Mapped[str | None] = mapped_column(String(64))
    suite: Mapped[bytes | None] = mapped_column(LargeBinary)
    size: Mapped[int]
    reason: Mapped[str | None]
    sampled_at: Mapped[datetime]
