"""Reads of pinned artefact sets and staging drills (their rows are written with
:func:`~rolloutd.store.writes.add_row`), and the audit row of each deploy."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from rolloutd.store.artefact_models import DeployRecord, Drill
from rolloutd.store.models import ArtefactSet
from rolloutd.store.writes import add_row


def artefact_set_named(session: Session, name: str) -> ArtefactSet | None:
    """The pinned set called ``name``, or None."""
    return session.scalar(select(ArtefactSet).where(ArtefactSet.name == name))


def artefact_sets(session: Session) -> list[ArtefactSet]:
    """Every pinned set, newest first."""
    return list(session.scalars(select(ArtefactSet).order_by(ArtefactSet.created_at.desc())))


def drill_by_id(session: Session, drill_id: int) -> Drill:
    """The drill ``drill_id`` (it exists: its id came from :func:`add_row`)."""
    return session.get_one(Drill, drill_id)


def latest_drill(
    session: Session, stable_digest: str, canary_digest: str, environment: str
) -> Drill | None:
    """The newest drill of this (stable, canary) pair in ``environment``, whatever its result."""
    return session.scalars(
        select(Drill)
        .where(*_of_pair(stable_digest, canary_digest, environment))
        .order_by(Drill.started_at.desc(), Drill.id.desc())
        .limit(1)
    ).first()


def drill_passed(
    session: Session, stable_digest: str, canary_digest: str, environment: str
) -> bool:
    """Whether a drill of exactly this (stable, canary) pair in ``environment`` has passed."""
    found = session.scalar(
        select(Drill.id)
        .where(*_of_pair(stable_digest, canary_digest, environment), Drill.result == "passed")
        .limit(1)
    )
    return found is not None


def _of_pair(
    stable_digest: str, canary_digest: str, environment: str
) -> tuple[ColumnElement[bool], ...]:
    return (
        Drill.stable_digest == stable_digest,
        Drill.canary_digest == canary_digest,
        Drill.environment == environment,
    )


def record_deploy(
    session: Session,
    outcome: dict[str, Any],
    *,
    executor: str,
    step: str,
    duration_s: float,
    started_at: datetime,
    rollout_id: int | None = None,
    drill_id: int | None = None,
) -> int:
    """Keep what one executor call did (exit status, output tail, timings) in
    ``deploy_records``, for a rollout's or a drill's audit trail: ``outcome`` is the JSON form
    of its result (``as_dict()`` of a deploy result, or of a verification, which has no set
    digest)."""
    record = DeployRecord(
        rollout_id=rollout_id,
        drill_id=drill_id,
        replica=outcome["replica"],
        set_name=outcome["set_name"],
        set_digest=str(outcome.get("set_digest", "")),
        executor=executor,
        step=step,
        ok=outcome["ok"],
        reason=outcome["reason"],
        duration_s=duration_s,
        started_at=started_at,
        detail=outcome,
    )
    return add_row(session, record).id
