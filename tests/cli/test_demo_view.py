"""The demo's summary tells an operator how to reach the database it kept."""

from __future__ import annotations

import shlex
from io import StringIO
from pathlib import Path

from rich.console import Console

from rolloutd.cli.demo_view import print_summary
from rolloutd.demo.run import DemoResult


def _summary(result: DemoResult) -> list[str]:
    out = StringIO()
    print_summary(result, Console(file=out, width=200, highlight=False, color_system=None))
    return [line.strip() for line in out.getvalue().splitlines()]


def test_the_status_hint_follows_the_export_that_it_needs(tmp_path: Path) -> None:
    """`rolloutctl status 1` in the summary works when pasted: the export of the demo's
    database URL comes before it, quoted for the shell."""
    database = f"sqlite:///{tmp_path / 'a dir' / 'rolloutd.db'}"
    result = DemoResult(
        scenario="oom",
        expected="rolled_back",
        state="rolled_back",
        weight=0,
        wall_seconds=21.0,
        rollout_id=1,
        report=str(tmp_path / "report-1.html"),
        database=database,
    )
    lines = _summary(result)
    export = f"export ROLLOUTD_DATABASE_URL={shlex.quote(database)}"
    assert export in lines
    status = next(i for i, line in enumerate(lines) if line.startswith("rolloutctl status 1"))
    assert lines.index(export) < status
