"""Human-readable output of rolloutctl: tables and timelines, drawn with rich.

JSON output is the contract for scripts; these renderings are for people and may change.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

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


def status(view: dict[str, Any]) -> None:
    """Print one rollout's status with its gates."""
    console = _console()
    state = view["state"]
    console.print(
        f"[bold]rollout {view['id']}[/] {view['name']}  "
        f"({view['service']}/{view['environment']})  "
        f"[{STATE_STYLE.get(state, '')}]{state}[/]"
    )
    bake = view["bake_seconds"]
    baked = f"  baked {view['baked_seconds'] / 3600:.1f}h of {bake / 3600:.1f}h" if bake else ""
    console.print(
        f"step {view['step'] + 1}/{view['steps']}: {view['step_name']}  "
        f"canary weight {view['weight']}%{baked}"
    )
    if view.get("rollback_cause"):
        console.print(f"[red]rollback: {view['rollback_cause']}[/]")
    if view.get("paused"):
        console.print(f"[yellow]paused ({view['paused']})[/]")
    if view["gates"]:
        table = Table("gate", "role", "verdict", "value", "threshold", "evaluated", "reason")
        for gate in view["gates"]:
            verdict = gate["verdict"]
            table.add_row(
                gate["name"],
                gate["role"],
                f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]",
                number(gate["value"]),
                gate["threshold"] or "-",
                _short_time(gate["evaluated_at"]),
                gate["reason"] or "",
            )
        console.print(table)
    console.print(f"updated {_short_time(view['updated_at'])}")


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
        state = row["state"]
        table.add_row(
            str(row["id"]),
            row["name"],
            row["service"],
            row["environment"],
            f"[{STATE_STYLE.get(state, '')}]{state}[/]",
            f"{row['step']} {row['step_name']}",
            f"{row['weight']}%",
            row["created_by"],
            _short_time(row["updated_at"]),
        )
    _console().print(table)


def history(events: list[dict[str, Any]]) -> None:
    """Print the audit log as a timeline."""
    console = _console()
    for event in events:
        console.print(
            f"{_short_time(event['at'])}  [bold]{event['kind']:<18}[/] "
            f"{event['actor']:<12} {event['detail']}"
        )
