"""The ``file`` driver's journal holds every change that landed, even one whose writer died."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rolloutd.routers.filedriver import FileRouter


def _weights(journal: Path) -> list[int]:
    return [json.loads(line)["canary_weight"] for line in journal.read_text().splitlines()]


def _killed_after_the_rename(path: Path, weight: int) -> None:
    """Set ``weight`` in another process that dies (os._exit, as a kill -9 would) after the
    rename and before its journal line."""
    probe = (
        "import os, sys, pathlib\n"
        "from rolloutd.routers.filedriver import FileRouter\n"
        "opened = pathlib.Path.open\n"
        "def open_or_die(self, mode='r', *args, **kwargs):\n"
        "    if self.name.endswith('.journal') and 'a' in mode:\n"
        "        os._exit(9)\n"
        "    return opened(self, mode, *args, **kwargs)\n"
        "pathlib.Path.open = open_or_die\n"
        f"FileRouter(sys.argv[1]).set_weight({weight})\n"
    )
    died = subprocess.run([sys.executable, "-c", probe, str(path)], check=False, timeout=60)
    assert died.returncode == 9


def test_a_change_whose_writer_died_after_the_rename_is_journaled_by_the_next_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "weights.json"
    router = FileRouter(path)
    router.set_weight(5)
    _killed_after_the_rename(path, 25)
    assert router.read_weight().weight == 25  # it landed
    assert _weights(router.journal) == [5]  # and went unlogged
    router.set_weight(100)
    assert _weights(router.journal) == [5, 25, 100]


def test_a_complete_journal_gets_one_line_a_write(tmp_path: Path) -> None:
    router = FileRouter(tmp_path / "weights.json")
    for weight in (5, 25, 25, 100):
        router.set_weight(weight)
    assert _weights(router.journal) == [5, 25, 25, 100]


def test_a_file_the_driver_did_not_write_is_replaced_and_not_journaled(tmp_path: Path) -> None:
    path = tmp_path / "weights.json"
    path.write_text("canary_weight = 5\n")  # a hand edit, not JSON
    router = FileRouter(path)
    router.set_weight(10)
    assert _weights(router.journal) == [10]
    assert router.read_weight().weight == 10
