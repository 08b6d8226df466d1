"""What the README's commands write into a clone by default is ignored by git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "written",
    [
        "rolloutd.log",  # rolloutd run > rolloutd.log, in "Try it by hand"
        "try.db",
        "try.db.lock",  # the daemon's single-instance lock beside an SQLite database
        "rolloutd.db.lock",
        "rollout-7.html",  # rolloutctl report 7 --html, its default name
        "live.jsonl",  # rolloutctl suite sample ... --out live.jsonl
        "sim/fleet.env",  # rolloutctl sim fleet --dir sim
        "sim-support/fleet.env",  # rolloutctl sim fleet --deployment support-70b --dir sim-support
        "try-support.db",
    ],
)
def test_a_file_the_walkthrough_writes_is_ignored(written: str) -> None:
    """``git check-ignore`` matches it against the clone's .gitignore."""
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", written],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{written} would litter a clone"
