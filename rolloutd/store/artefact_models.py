"""Deploy records and staging drills: the evidence that a rollback path works.

A drill is keyed by the digests of the (stable, canary) artefact sets, not by their names,
so a production rollout may start only on the exact pair a staging drill exercised. A
deploy record keeps what one executor run did to one replica (exit status, output tail,
timings) for the audit trail; the intent log keeps only whether the action is done.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from rolloutd.store.models import Base, PrimaryKey, RolloutRef, Sha256, one_of

DRILL_RESULTS = ("running", "passed", "failed")


class Drill(Base):
    """One exercise of the forward deploy and the rollback of a plan's artefact pair."""

    __tablename__ = "drills"
    __table_args__ = (
        Index(None, "stable_digest", "canary_digest", "environment", "result"),
        one_of("result", DRILL_RESULTS),
    )

    id: Mapped[PrimaryKey]
    plan_name: Mapped[str] = mapped_column(String(200))
    service: Mapped[str] = mapped_column(String(200))
    environment: Mapped[str] = mapped_column(String(100))
    stable_set: Mapped[str] = mapped_column(String(200))
    canary_set: Mapped[str] = mapped_column(String(200))
    stable_digest: Mapped[Sha256]
    canary_digest: Mapped[Sha256]
    result: Mapped[str] = mapped_column(String(20))
    actor: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    reason: Mapped[str | None]
    detail: Mapped[dict[str, Any]]


class DeployRecord(Base):
    """What one executor run did to one replica, for a rollout or a drill."""

    __tablename__ = "deploy_records"
    __table_args__ = (
        Index(None, "rollout_id", "started_at"),
        Index(None, "drill_id"),
    )

    id: Mapped[PrimaryKey]
    rollout_id: Mapped[RolloutRef | None]
    drill_id: Mapped[int | None] = mapped_column(ForeignKey("drills.id"))
    replica: Mapped[str] = mapped_column(String(200))
    set_name: Mapped[str] = mapped_column(String(200))
    set_digest: Mapped[Sha256]
    executor: Mapped[str] = mapped_column(String(40))
    step: Mapped[str] = mapped_column(String(40))
    ok: Mapped[bool]
    reason: Mapped[str]
    duration_s: Mapped[float]
    started_at: Mapped[datetime]
    detail: Mapped[dict[str, Any]]


__all__ = ["DRILL_RESULTS", "Base", "DeployRecord", "Drill"]
