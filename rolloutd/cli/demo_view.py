"""What the demo shows: a live view of the rollout, then a summary an operator can read."""

from __future__ import annotations

import shlex
import sys
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rolloutd.cli.render import STATE_STYLE, gate_rows, step_text
from rolloutd.demo.run import DemoResult
from rolloutd.demo.scenarios import Scenario


class LiveView:
    """Redraws the step, the weights and every gate; on a pipe, prints one line per change."""

    def __init__(self, scenario: Scenario, console: Console | None = None) -> None:
        self.scenario = scenario
        width = None if sys.stdout.isatty() else 160
        self.console = console or Console(highlight=False, width=width)
        self.notes: list[str] = []
        self._live: Live | None = None
        self._last_line = ""

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=8, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def __call__(self, view: dict[str, Any], note: str | None) -> None:
        if note:
            self.notes.append(note)
        if self._live is not None:
            self._live.update(self._render(view))
            return
        step = f"step {view['step']} of {view['steps']}"
        line = f"{view['state']:<18} {step} {view['step_name']:<20} {view['weight']}%"
        if line != self._last_line:
            self.console.print(line)
            self._last_line = line
        if note:
            self.console.print(f"  * {note}")

    def _render(self, view: dict[str, Any]) -> Group:
        state = view["state"]
        header = Text.from_markup(
            f"[bold]rolloutctl demo --scenario {self.scenario.name}[/]  "
            f"rollout {view['id']}  [{STATE_STYLE.get(state, '')}]{state}[/]\n"
            f"{step_text(view)}   "
            f"stable {100 - view['weight']}%  canary {view['weight']}%"
        )
        table = Table("gate", "role", "verdict", "value", "threshold", expand=False)
        table.add_column("reason", no_wrap=True, overflow="ellipsis", max_width=48)
        notes = Text("\n".join(f"* {n}" for n in self.notes[-4:]), style="yellow")
        return Group(header, gate_rows(table, view["gates"]), notes)


def print_summary(result: DemoResult, console: Console | None = None) -> None:
    """The timeline, the breach and the rollback, and the commands an operator would use."""
    out = console or Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    verdict = "[green]as expected[/]" if result.ok else f"[red]expected {result.expected}[/]"
    out.print(
        f"\n[bold]{result.scenario}[/]: rollout {result.rollout_id} ended "
        f"[{STATE_STYLE.get(result.state, '')}]{result.state}[/] ({verdict}), canary weight "
        f"{result.weight}%, in {result.wall_seconds:.1f} s"
    )
    if result.fault_at:
        out.print(f"fault injected at: {result.fault_at}")
    if result.rollback_cause:
        out.print(f"[red]rollback cause:[/] {result.rollback_cause}")
    out.print("\n[bold]timeline[/] (simulated time)")
    for event in result.events:
        out.print(f"  {event['at'][:19].replace('T', ' ')}  {event['kind']:<17} {event['detail']}")
    out.print("\n[bold]traffic[/]")
    for pool, counts in sorted(result.traffic.items()):
        out.print(f"  {pool:<7} " + "  ".join(f"{k} {v}" for k, v in counts.items()))
    rid = result.rollout_id
    out.print("\n[bold]what an operator would have typed[/]")
    if result.database:
        # The commands below read the demo's database, which is not the default ./rolloutd.db.
        out.print(f"  export ROLLOUTD_DATABASE_URL={shlex.quote(result.database)}", markup=False)
    for command in [f"rolloutctl start {result.plan or 'atlas-70b-demo.yaml'}", *result.commands]:
        out.print(f"  {command}")
    out.print(f"  rolloutctl status {rid}        # at any time; --output json for scripts")
    out.print(f'  rolloutctl abort {rid} --reason "..."   # what rolloutd did itself on a breach')
    out.print(f"  rolloutctl history {rid}")
    if result.report:
        out.print("\n[bold]look at it[/]")
        out.print(f"  the rollout's page: {result.report}")
        out.print(f"  its database:       {result.database}")
