"""Human-readable output of rolloutctl: tables and timelines, drawn with rich.

JSON output is the contract for scripts; these renderings are for people and may change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rolloutd.core.progress import State, shown_state
from rolloutd.views import not_leading

VERDICT_STYLE = {
    "pass": "green",
    "fail": "yellow",
    "breach": "bold red",
    "inconclusive": "magenta",
    "pending": "dim",
}
STATE_STYLE = {
    "running": "cyan",
    "paused": "yellow",
    "awaiting_promotion": "bold yellow",
    "rolling_back": "bold red",
    "rolled_back": "red",
    "completed": "green",
    "aborted": "red",
    "failed": "bold red",
    "pending": "dim",
}


def _console() -> Console:
    # Piped output has no terminal width to fit; do not squeeze columns into 80.
    width = None if sys.stdout.isatty() else 200
    return Console(highlight=False, soft_wrap=True, width=width)


def _short_time(value: str | None) -> str:
    return "-" if not value else value.replace("T", " ")[:19]


def number(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def state_text(view: dict[str, Any]) -> str:
    """A view's state as people read it, styled: ``rolled_back (traffic only: no executor)``
    for a rollback that redeployed nothing."""
    state = view["state"]
    shown = shown_state(State(state), view.get("rollback"))
    return f"[{STATE_STYLE.get(state, '')}]{escape(shown)}[/]"


def step_text(view: dict[str, Any]) -> str:
    """Where a view's rollout is, as every view numbers steps: ``step 2 of 6: canary 5%``."""
    return f"step {view['step']} of {view['steps']}: {view['step_name']}"


def no_executor_line(view: dict[str, Any]) -> str | None:
    """Why a traffic-only rollback redeployed nothing, when the plan says why."""
    reason = view.get("no_executor_reason")
    return None if not reason else f"no executor: {escape(reason)}"


def status(view: dict[str, Any]) -> None:
    """Print one rollout's status with its gates."""
    console = _console()
    console.print(
        f"[bold]rollout {view['id']}[/] {view['name']}  "
        f"({view['service']}/{view['environment']})  {state_text(view)}"
    )
    bake = view["bake_seconds"]
    baked = f"  baked {view['baked_seconds'] / 3600:.1f}h of {bake / 3600:.1f}h" if bake else ""
    console.print(f"{step_text(view)}  canary weight {view['weight']}%{baked}")
    if view.get("load"):
        console.print(load_line(view["load"]))
    if view.get("rollback_cause"):
        console.print(f"[red]rollback: {view['rollback_cause']}[/]")
    if no_executor_line(view):
        console.print(f"[red]{no_executor_line(view)}[/]")
    if view.get("paused"):
        console.print(f"[yellow]paused ({view['paused']})[/]")
    if view["gates"]:
        table = Table("gate", "role", "verdict", "value", "threshold", "evaluated", "reason")
        console.print(gate_rows(table, view["gates"]))
        for gate in view["gates"]:
            if isinstance(gate.get("resolution"), dict):
                console.print(resolution_line(gate["name"], gate["resolution"]))
    console.print(f"updated {_short_time(view['updated_at'])}")


GateCell = Callable[[dict[str, Any]], str]
# What a gate table shows in each column, by the column's heading.
GATE_CELLS: dict[str, GateCell] = {
    "gate": lambda gate: gate["name"],
    "role": lambda gate: ", ".join(gate.get("roles") or [gate["role"]]),
    "verdict": lambda gate: f"[{VERDICT_STYLE.get(gate['verdict'], '')}]{gate['verdict']}[/]",
    "value": lambda gate: number(gate["value"]),
    "threshold": lambda gate: gate["threshold"] or "-",
    "evaluated": lambda gate: _short_time(gate["evaluated_at"]),
    "trend": lambda gate: sparkline(gate.get("trend", [])),
    "reason": lambda gate: gate["reason"] or "",
}


def gate_rows(
    table: Table, gates: list[dict[str, Any]], cells: Mapping[str, GateCell] | None = None
) -> Table:
    """Add a row per gate to ``table``, each column filled as ``GATE_CELLS`` says for its
    heading (``cells`` replaces some); returns the table."""
    fill = {**GATE_CELLS, **(cells or {})}
    for gate in gates:
        table.add_row(*(fill[str(column.header)](gate) for column in table.columns))
    return table


def _gate_time_of_day(gate: dict[str, Any]) -> str:
    return _short_time(gate["evaluated_at"])[11:]


def resolution_line(gate: str, resolution: dict[str, Any]) -> str:
    """What p95 shift a latency gate's histogram can show at its target."""
    target, lower = resolution.get("target_seconds"), resolution.get("lower_edge")
    upper = resolution.get("upper_edge")
    if not isinstance(target, int | float) or not isinstance(lower, int | float):
        return f"{gate}: bucket resolution unknown"
    if not isinstance(upper, int | float):
        return (
            f"{gate}: the histogram stops at {lower:g}s, at or below the {target:g}s target: "
            "the p95 bound cannot show the canary slower than it"
        )
    return (
        f"{gate}: p95 resolved at the {target:g}s target in steps of {upper - lower:g}s "
        f"({(upper - lower) / target:.0%}, edges {lower:g}s and {upper:g}s)"
    )


def load_line(load: dict[str, Any]) -> str:
    """The pools' load per replica and the canary's share of stable's, in one line."""
    unit = "req/s" if load.get("basis") != "inflight" else "in flight"
    key = "inflight" if load.get("basis") == "inflight" else "requests_per_s"
    canary, stable = (number((load.get(p) or {}).get(key)) for p in ("canary", "stable"))
    planned = load.get("planned_ratio")
    plan = f" (planned {planned:.2f})" if isinstance(planned, float) else ""
    ratio = load.get("ratio")
    judged = (
        f"ratio {ratio:.2f}{plan}"
        if isinstance(ratio, float)
        else f"unknown: {escape(str(load.get('unknown')))}"
    )
    return (
        f"load per replica: canary {canary}, stable {stable} {unit}; {judged}  "
        f"[dim]({load.get('gate')}, {_short_time(load.get('evaluated_at'))})[/]"
    )


def statuses(views: list[dict[str, Any]]) -> None:
    """Print the status of every active rollout, or say there is none."""
    if not views:
        _console().print("no active rollouts")
    for i, view in enumerate(views):
        if i:
            _console().print()
        status(view)


def rollouts(rows: list[dict[str, Any]]) -> None:
    """Print the rollout list as a table."""
    table = Table("id", "name", "service", "env", "state", "step", "weight", "by", "updated")
    for row in rows:
        table.add_row(
            str(row["id"]),
            row["name"],
            row["service"],
            row["environment"],
            state_text(row),
            f"{row['step']} of {row['steps']}: {row['step_name']}",
            f"{row['weight']}%",
            row["created_by"],
            _short_time(row["updated_at"]),
        )
    _console().print(table)


# Event kinds that deserve a colour in a timeline; the rest are plain.
EVENT_STYLE = {
    "rollback_started": "bold red",
    "rolled_back": "red",
    "aborted": "red",
    "failed": "bold red",
    "action_failed": "yellow",
    "alert_undeliverable": "bold yellow",
    "alert_waiting": "yellow",
    "drift": "yellow",
    "capacity_invalid": "yellow",
    "suite_run_failed": "yellow",
    "suite_run_superseded": "dim",
    "suite_run_cancelled": "dim",
    "completed": "green",
    "command": "cyan",
}
SPARKS = "▁▂▃▄▅▆▇█"


def _elapsed(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"+{seconds}s"
    if seconds < 3600:
        return f"+{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"+{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"+{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def history(events: list[dict[str, Any]]) -> None:
    """Print the audit log as a timeline: one heading per day, time, time since the first
    event, what happened and who did it."""
    from datetime import datetime

    console = _console()
    if not events:
        console.print("no events")
        return
    first = datetime.fromisoformat(events[0]["at"])
    day = None
    for event in events:
        at = datetime.fromisoformat(event["at"])
        if at.date() != day:
            day = at.date()
            console.print(f"[bold]{day.isoformat()}[/]")
        style = EVENT_STYLE.get(event["kind"], "")
        kind = f"[{style}]{event['kind']:<19}[/]" if style else f"{event['kind']:<19}"
        console.print(
            f"  {at.strftime('%H:%M:%S')}  {_elapsed((at - first).total_seconds()):>8}  "
            f"{kind} {event['actor']:<16} {event['detail']}"
        )


def sparkline(values: list[float | None]) -> str:
    """A small trend of ``values`` (oldest first); a missing value is a gap."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = high - low
    marks = []
    for value in values:
        if value is None:
            marks.append(" ")
        else:
            level = 0 if span == 0 else round((value - low) / span * (len(SPARKS) - 1))
            marks.append(SPARKS[level])
    return "".join(marks)


def watch(view: dict[str, Any]) -> Any:
    """One frame of ``rolloutctl status --watch``: status, gates with trends, last events."""
    from rich.console import Group
    from rich.text import Text

    bake = view["bake_seconds"]
    baked = f"  baked {view['baked_seconds'] / 3600:.1f}h of {bake / 3600:.1f}h" if bake else ""
    parts: list[Any] = [
        Text.from_markup(
            f"[bold]rollout {view['id']}[/] {view['name']}  "
            f"({view['service']}/{view['environment']})  {state_text(view)}"
        ),
        Text(
            f"{step_text(view)}   "
            f"weights: stable {100 - view['weight']}% / canary {view['weight']}%{baked}"
        ),
    ]
    if view.get("rollback_cause"):
        parts.append(Text(f"rollback: {view['rollback_cause']}", style="red"))
    if no_executor_line(view):
        parts.append(Text.from_markup(f"[red]{no_executor_line(view)}[/]"))
    if view.get("paused"):
        parts.append(Text(f"paused ({view['paused']})", style="yellow"))
    nobody = not_leading(view["leader"]) if "leader" in view and not view["ended"] else None
    if nobody is not None:
        parts.append(Text(f"{nobody}: nothing moves this rollout until one does", style="yellow"))
    if view["gates"]:
        table = Table("gate", "role", "value", "threshold", "verdict", "trend", "evaluated")
        # A frame shows today's gates: the time of day is enough.
        parts.append(gate_rows(table, view["gates"], {"evaluated": _gate_time_of_day}))
    events = Table("time", "event", "detail", box=None, show_header=False, pad_edge=False)
    for event in view.get("events", []):
        style = EVENT_STYLE.get(event["kind"], "")
        events.add_row(
            _short_time(event["at"])[11:],
            f"[{style}]{event['kind']}[/]" if style else event["kind"],
            event["detail"],
        )
    parts += [Text("last events:", style="bold"), events]
    ended = "  (ended)" if view.get("ended") else ""
    parts.append(Text(f"updated {_short_time(view['updated_at'])}{ended}", style="dim"))
    return Group(*parts)


def watch_live(
    frame: Callable[[], dict[str, Any]],
    interval: float,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """Redraw :func:`watch` of ``frame()`` every ``interval`` seconds until the rollout ends."""
    import time

    from rich.live import Live

    pause = sleep or time.sleep
    view = frame()
    console = _console()
    if not console.is_terminal:
        # Piped (a log, `tee`, a pager): rich's Live would hold every frame until the end;
        # print each one as it comes, one after the other, flushed, without cursor codes.
        while True:
            console.print(watch(view))
            console.file.flush()
            if view["ended"]:
                return
            pause(interval)
            view = frame()
    with Live(watch(view), console=_console(), auto_refresh=False) as live:
        while not view["ended"]:
            pause(interval)
            view = frame()
            live.update(watch(view), refresh=True)


FOUND_STYLE = {"ok": "green", "no data yet": "yellow", "absent": "bold red"}


def plan_checks(rows: list[dict[str, Any]]) -> None:
    """Print the preflight: every gate's signal on both pools, and why not where it failed."""
    table = Table("gate", "signal", "pool", "found", "value", "samples", "why not / query")
    for row in rows:
        found = row["found"]
        gate = row["gate"] + (" *" if row["first_step"] else "")
        table.add_row(
            gate,
            row["signal"],
            row["pool"],
            f"[{FOUND_STYLE.get(found, '')}]{found}[/]",
            number(row["value"]),
            number(row["samples"]),
            row["why"] or (row["query"] or ""),
        )
    console = _console()
    console.print(table)
    console.print("* judged from the first tick: the first step's gates and the rollback triggers")
