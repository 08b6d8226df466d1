"""rolloutctl run in-process by the CLI tests, with what it prints captured."""

from __future__ import annotations

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
