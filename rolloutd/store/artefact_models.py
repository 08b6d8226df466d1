"""Deploy records and staging drills: the evidence that a rollback path works.

A drill is keyed by the digests of the (stable, canary) artefact sets, not by their names,
so a production rollout may start only on the exact pair a staging drill exercised. A
deploy record keeps what one executor run did to one replica (exit status, output tail,
timings) for the audit trail; the intent log keeps only whether the action is done.
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
)
from sqlalchemy.orm import Mapped, mapped_column

from rolloutd.store.models import Base
from rolloutd.store.timestamps import UTCDateTime

DRILL_RESULTS = ("running", "passed", "failed")


class Drill(Base):
    """One exercise of the forward deploy and the rollback of a plan's artefact pair."""

    __tablename__ = "drills"
    __table_args__ = (
        Index(None, "stable_digest", "canary_digest", "environment", "result"),
        CheckConstraint(f"result IN ({', '.join(repr(r) for r in DRILL_RESULTS)})", name="result"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_name: Mapped[str] = mapped_column(String(200))
    service: Mapped[str] = mapped_column(String(200))
    environment: Mapped[str] = mapped_column(String(100))
    stable_set: Mapped[str] = mapped_column(String(200))
    canary_set: Mapped[str] = mapped_column(String(200))
    stable_digest: Mapped[str] = mapped_column(String(64))
    canary_digest: Mapped[str] = mapped_column(String(64))
    result: Mapped[str] = mapped_column(String(20))
    actor: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class DeployRecord(Base):
    """What one executor run did to one replica, for a rollout or a drill."""

    __tablename__ = "deploy_records"
    __table_args__ = (
        Index(None, "rollout_id", "started_at"),
        Index(None, "drill_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int | None] = mapped_column(ForeignKey("rollouts.id"))
    drill_id: Mapped[int | None] = mapped_column(ForeignKey("drills.id"))
    replica: Mapped[str] = mapped_column(String(200))
    set_name: Mapped[str] = mapped_column(String(200))
    set_digest: Mapped[str] = mapped_column(String(64))
    executor: Mapped[str] = mapped_column(String(40))
    step: Mapped[str] = mapped_column(String(40))
    ok: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str] = mapped_column(Text)
    duration_s: Mapped[float] = mapped_column(Double)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


__all__ = ["DRILL_RESULTS", "Base", "DeployRecord", "Drill"]
