"""Reads of pinned artefact sets and staging drills; their rows are written with
:func:`~rolloutd.store.writes.add_row`."""

from __future__ import annotations

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from rolloutd.store.artefact_models import Drill
from rolloutd.store.models import ArtefactSet


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
