"""The pages: rollouts, one rollout, and the same rollout as a self-contained report.

Rendered with Jinja2 (autoescaped) from the store; every page passes through the secret
scrubber last, so a secret that reached an event or an evaluation's reason (a webhook URL,
a database password) is shown as ``***`` here as everywhere else. The report inlines its
stylesheet and charts and carries no script: one file for a ticket or a postmortem.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

import jinja2

from rolloutd.core.progress import State, shown_state
from rolloutd.redact import scrub
from rolloutd.store import page_reads
from rolloutd.views import current_state, status_view
from rolloutd.web.charts import gate_svg, weight_svg
from rolloutd.web.data import list_version, rollout_page
from rolloutd.web.decision import MEANING, VERDICTS, shown_verdict
from rolloutd.web.runs import run_page

if TYPE_CHECKING:
    from rolloutd.store.types import Session

SHOWN = 50
"""Rollouts on the list page, newest first, after the filters."""
STATIC = {"rolloutd.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
_environment = jinja2.Environment(
    loader=jinja2.PackageLoader("rolloutd.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _when(value: object) -> str:
    """A time as the pages show it: to the second, without the zone's noise (all are UTC)."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            return value
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


_environment.filters["when"] = _when


def static(name: str) -> tuple[bytes, str] | None:
    """A static asset by name, with its content type, or None."""
    if name not in STATIC:
        return None
    return (resources.files("rolloutd.web").joinpath("static", name).read_bytes(), STATIC[name])


def index_page(session: Session, filters: dict[str, str], *, now: datetime) -> str:
    """The list of rollouts, newest first, filtered by service, environment and state."""
    rollouts = page_reads.all_rollouts(session)
    services = sorted({r.service for r in rollouts})
    environments = sorted({r.environment for r in rollouts})
    rows = []
    for rollout in rollouts:
        if filters.get("service") and rollout.service != filters["service"]:
            continue
        if filters.get("environment") and rollout.environment != filters["environment"]:
            continue
        # The state follows from the stored outline and progress: only a shown row reads gates.
        if filters.get("state") and current_state(rollout).value != filters["state"]:
            continue
        view = status_view(session, rollout)
        view["verdicts"] = [
            {"name": g["name"], "verdict": shown_verdict(g["verdict"], g["roles"])}
            for g in view["gates"]
        ]
        view["state_text"] = shown_state(State(view["state"]), view["rollback"])
        view["age"] = _age(now - rollout.created_at)
        rows.append(view)
        if len(rows) == SHOWN:
            break
    return _render(
        "index.html",
        report=False,
        subtitle=f"{len(rollouts)} rollouts",
        version=list_version(session),
        version_url="/version",
        rollouts=rows,
        services=services,
        environments=environments,
        states=[s.value for s in State],
        filters={
            **{key: filters.get(key, "") for key in ("service", "environment", "state")},
            "any": any(filters.values()),
        },
    )


def rollout_html(session: Session, rollout_id: int, *, now: datetime, report: bool) -> str:
    """The rollout page, live (``report=False``) or as a self-contained report.

    :raises NotFound: no rollout ``rollout_id``.
    """
    page = rollout_page(session, rollout_id, now=now)
    newest = {
        g["name"]: {**g, "verdict": shown_verdict(g["verdict"], g["roles"])}
        for g in page.status["gates"]
    }
    return _render(
        "rollout.html",
        report=report,
        css=_css() if report else "",
        subtitle=f"rollout {rollout_id}"
        + (f" · rendered {now:%Y-%m-%d %H:%M:%S}" if report else ""),
        version=page.version,
        version_url=f"/rollouts/{rollout_id}/version",
        s=page.status,
        state_text=shown_state(State(page.status["state"]), page.status["rollback"]),
        weight_svg=weight_svg(page.weights, page.started, page.ended, page.steps),
        gates=[
            {
                "chart": chart,
                "svg": gate_svg(chart, page.started, page.ended, page.steps),
                "newest": newest.get(chart.name),
            }
            for chart in page.gates
        ],
        suite_runs=page.suite_runs,
        outcomes=_field_outcomes(),
        artefacts=page.artefacts,
        drills=page.drills,
        steps=page.steps,
        events=page.events,
        decision=page.decision,
        not_reached=page.not_reached,
        verdicts=VERDICTS,
        meaning=MEANING,
    )


def run_html(session: Session, run_id: int) -> str:
    """One suite run's page.

    :raises NotFound: no run ``run_id``.
    """
    run = run_page(session, run_id)
    return _render(
        "run.html",
        report=False,
        subtitle=f"suite run {run_id}",
        version="",
        version_url="",
        r=run,
    )


def rollout_json(session: Session, rollout_id: int, *, now: datetime) -> dict[str, Any]:
    """The report's data as JSON: the status, the timeline and each gate's drawn points.

    :raises NotFound: no rollout ``rollout_id``.
    """
    page = rollout_page(session, rollout_id, now=now)
    document = {
        "status": page.status,
        "events": page.events,
        "steps": page.steps,
        "weights": [{"at": at, "weight": w} for at, w in page.weights],
        "gates": [
            {
                "name": chart.name,
                "roles": chart.roles,
                "signal": chart.signal,
                "threshold": chart.threshold,
                "stored": chart.stored,
                "query": chart.query,
                "points": [
                    {
                        "id": p.id,
                        "at": p.at,
                        "step": p.step,
                        "verdict": p.verdict,
                        "canary": p.canary,
                        "stable": p.stable,
                        "lower": p.lower,
                        "upper": p.upper,
                        "decided_rollback": p.decided_rollback,
                        "reason": p.reason,
                    }
                    for p in chart.points
                ],
            }
            for chart in page.gates
        ],
        "suite_runs": page.suite_runs,
        "artefacts": page.artefacts,
        "drills": page.drills,
        "decision": None if page.decision is None else asdict(page.decision),
        "not_reached": page.not_reached,
    }
    scrubbed: dict[str, Any] = json.loads(scrub(json.dumps(document, default=_iso)))
    return scrubbed


def _render(template: str, **context: Any) -> str:
    return scrub(_environment.get_template(template).render(**context))


def _css() -> str:
    return resources.files("rolloutd.web").joinpath("static", "rolloutd.css").read_text()


def _field_outcomes() -> list[str]:
    from rolloutd.core.suite_outcomes import FIELD_OUTCOMES

    return list(FIELD_OUTCOMES)


def _age(delta: Any) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
