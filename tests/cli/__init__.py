"""rolloutctl run in-process by the CLI tests, with what it prints captured."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from rolloutd.cli.ctl import main


class Ctl:
    """Runs rolloutctl in-process against one database and captures what it prints."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    @classmethod
    def on(
        cls, url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> Ctl:
        """rolloutctl pointed at the database at ``url``, reading no env file."""
        monkeypatch.setenv("ROLLOUTD_DATABASE_URL", url)
        monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
        return cls(capsys)

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(list(argv))
        out, err = self.capsys.readouterr()
        assert "Traceback" not in out + err
        return int(exited.value.code or 0), out, err

    def json(self, *argv: str) -> Any:
        code, out, err = self(*argv, "--output", "json")
        assert code == 0, err
        return json.loads(out)


def imported_by(url: str, argv: list[str], modules: tuple[str, ...]) -> tuple[int, list[str], str]:
    """Run ``rolloutctl argv`` in a new interpreter on the database at ``url`` (no env file):
    its exit code, which of ``modules`` it imported, and what it printed on stdout."""
    import subprocess
    import sys

    probe = (
        "import io, sys, contextlib\n"
        "from rolloutd.cli.ctl import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    try:\n        main({argv!r})\n"
        "    except SystemExit as e:\n        code = e.code\n"
        f"print(repr((code, [m for m in {modules!r} if m in sys.modules], out.getvalue())),"
        " file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={
            "ROLLOUTD_DATABASE_URL": url,
            "ROLLOUTD_ENV_FILE": "/nonexistent",
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    code, present, out = ast.literal_eval(result.stderr.strip().splitlines()[-1])
    return code, present, out
