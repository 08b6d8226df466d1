"""One suite run's page: the run, each field's outcomes, and each case with its fields.

``rolloutctl eval`` says "stored as run N" and a rollout's suite gate stores a run per look;
this is where such a run is read, linked from its rollout's page (an ad-hoc run has no
rollout and is reached by its id alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rolloutd.core.suite_outcomes import FIELD_OUTCOMES
from rolloutd.errors import NotFound
from rolloutd.redact import scrub
from rolloutd.store import suite_runs

if TYPE_CHECKING:
    from rolloutd.store.types import Session


def run_page(session: Session, run_id: int) -> dict[str, Any]:
    """The run page's data: the run's counts, per-field outcome counts, and every case with
    its field results in suite order.

    :raises NotFound: no run ``run_id``.
    """
    run = suite_runs.run_row(session, run_id)
    if run is None:
        raise NotFound(f"no suite run {run_id}")
    fields: dict[str, dict[str, int]] = {}
    by_case: dict[int, list[dict[str, Any]]] = {}
    for found in suite_runs.field_rows(session, run_id):
        counts = fields.setdefault(found.field, dict.fromkeys(FIELD_OUTCOMES, 0))
        counts[found.outcome] = counts.get(found.outcome, 0) + 1
        by_case.setdefault(found.case_result_id, []).append(
            {
                "field": found.field,
                "outcome": found.outcome,
                "expected": scrub(found.expected or ""),
                "actual": scrub(found.actual or ""),
            }
        )
    cases = [
        {
            "case": case.case_id,
            "outcome": case.outcome,
            "expected_tool": case.expected_tool,
            "tool": case.tool,
            "error": scrub(case.error or ""),
            "schema_errors": [scrub(e) for e in case.schema_errors or []],
            "fields": by_case.get(case.id, []),
        }
        for case in suite_runs.case_rows(session, run_id)
    ]
    return {
        "id": run.id,
        "rollout_id": run.rollout_id,
        "gate": run.gate,
        "role": run.role,
        "step": None if run.step_index is None else run.step_index + 1,
        "suite_path": run.suite_path,
        "suite_sha256": run.suite_sha256,
        "endpoint": scrub(run.endpoint),
        "model": run.model,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "cases": run.cases,
        "measured": run.measured,
        "exactness": run.exactness,
        "strict_exactness": run.strict_exactness,
        "schema_violations": run.schema_violations,
        "request_errors": run.request_errors,
        "fields": dict(sorted(fields.items())),
        "outcomes": list(FIELD_OUTCOMES),
        "case_results": cases,
    }
