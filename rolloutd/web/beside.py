"""What the rollout page shows beside its charts: the suite runs, the pinned artefact sets and
the drills of the rollout's artefact pair."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.deploy.drills import DRILL_ENVIRONMENT
from rolloutd.redact import scrub
from rolloutd.store import page_reads

if TYPE_CHECKING:
    from rolloutd.store.types import Session


def suite_runs(session: Session, rollout_id: int) -> list[dict[str, Any]]:
    runs = page_reads.suite_runs_of(session, rollout_id)
    if not runs:
        return []
    fields: dict[int, dict[str, dict[str, int]]] = {}
    for run_id, name, outcome, count in page_reads.field_outcomes(session, [r.id for r in runs]):
        fields.setdefault(run_id, {}).setdefault(name, {})[outcome] = count
    return [
        {
            "id": run.id,
            "gate": run.gate,
            "role": run.role,
            "step": None if run.step_index is None else run.step_index + 1,
            "finished_at": run.finished_at,
            "cases": run.cases,
            "exactness": run.exactness,
            "schema_violations": run.schema_violations,
            "request_errors": run.request_errors,
            "fields": dict(sorted(fields.get(run.id, {}).items())),
        }
        for run in runs
    ]


def artefacts(session: Session, names: list[str]) -> list[dict[str, Any]]:
    found = page_reads.artefact_sets_named(session, names)
    return [
        {
            "name": a.name,
            "engine": a.engine,
            "digest": a.digest,
            "full_digest": a.digest,
            "files": len(a.files),
            "role": "stable" if a.name == names[0] else "canary",
        }
        for a in sorted(found, key=lambda a: names.index(a.name))
    ]


def drills(
    session: Session, artefacts: list[dict[str, Any]], created: datetime
) -> list[dict[str, Any]]:
    """The drills of the rollout's (stable, canary) pair, whatever plan ran them: admission
    asks for the pair's passed staging drill, not one of a plan of the same name. The newest
    passed staging drill before the rollout was created is the one its start was admitted on."""
    digests = {a["role"]: a["full_digest"] for a in artefacts}
    if set(digests) != {"stable", "canary"}:
        return []
    found = page_reads.drills_of_pair(session, digests["stable"], digests["canary"], 10)
    admitted = next(
        (
            d.id
            for d in found
            if d.environment == DRILL_ENVIRONMENT
            and d.result == "passed"
            and d.started_at <= created
        ),
        None,
    )
    return [
        {
            "id": d.id,
            "plan": d.plan_name,
            "environment": d.environment,
            "result": d.result,
            "started_at": d.started_at,
            "reason": scrub(d.reason or ""),
            "admitted": d.id == admitted,
        }
        for d in found
    ]
