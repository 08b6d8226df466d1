"""The layout's contracts bite: import-linter fails on a copy of the tree with one forbidden
import added, for each contract, and the core never reads the clock."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.slow


def lint_copy(
    tmp_path: Path, edit: tuple[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` over a copy of the package, with ``edit`` = (file, line) appended."""
    shutil.copytree(
        ROOT / "rolloutd", tmp_path / "rolloutd", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    if edit is not None:
        path = tmp_path / edit[0]
        path.write_text(path.read_text() + f"\n{edit[1]}\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", "pyproject.toml", "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )


def test_the_unchanged_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_copy(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("file", "line", "contract"),
    [
        ("rolloutd/store/queries.py", "import rolloutd.daemon.service", "Layers: every top-level"),
        ("rolloutd/routers/base.py", "import rolloutd.reconcile.tick", "Layers: every top-level"),
        ("rolloutd/core/machine.py", "import rolloutd.store.db", "The core is pure"),
        ("rolloutd/core/progress.py", "import time", "The core is pure"),
        ("rolloutd/core/durations.py", "import os", "The core is pure"),
        ("rolloutd/routers/filedriver.py", "import rolloutd.store.queries", "Drivers never touch"),
        ("rolloutd/deploy/triton.py", "import sqlalchemy", "Drivers never touch"),
        ("rolloutd/reconcile/tick.py", "import rolloutd.sim.engine", "The simulated fleet"),
        ("rolloutd/reconcile/tick.py", "from sqlalchemy import select", "SQL stays in the store"),
        ("rolloutd/web/data.py", "import sqlalchemy.orm", "SQL stays in the store"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, file: str, line: str, contract: str
) -> None:
    result = lint_copy(tmp_path, (file, line))
    assert result.returncode == 1, result.stdout + result.stderr
    # The report wraps long names: the verdict is the first KEPT/BROKEN after the name.
    after = result.stdout[result.stdout.index(contract) :]
    kept, broken = after.find("KEPT"), after.find("BROKEN")
    assert broken != -1 and (kept == -1 or broken < kept), result.stdout


def test_the_core_never_reads_the_clock_or_the_environment() -> None:
    """What import-linter cannot see: a call of ``datetime.now``/``utcnow``/``today`` or a
    read of ``os.environ`` anywhere under ``rolloutd/core``."""
    found = []
    for path in sorted((ROOT / "rolloutd" / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _reads_the_clock(node) or _reads_the_environment(node):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    assert found == []


def _reads_the_clock(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    owner = node.func.value
    name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
    return node.func.attr in {"now", "utcnow", "today"} and name in {"datetime", "date"}


def _reads_the_environment(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv"}
