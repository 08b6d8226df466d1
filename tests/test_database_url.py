"""The database URL read without pydantic-settings: the very URL ``load_settings()`` reads, or
None when that is in doubt; its password hidden; and rolloutctl starting without
pydantic-settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rolloutd import redact
from rolloutd.cli.errors import BAD_INPUT
from rolloutd.database_url import DEFAULT_DATABASE_URL, configured_database_url
from rolloutd.errors import BadInput
from rolloutd.settings import load_settings, variable
from rolloutd.store.db import upgrade
from tests.cli import Ctl, imported_by

NAME = "ROLLOUTD_DATABASE_URL"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No ROLLOUTD_* variable (in any letter case) from the caller's environment, no env file,
    and no secret registered yet."""
    for name in [name for name in os.environ if name.upper().startswith("ROLLOUTD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.setattr(redact, "_secrets", set())
    yield


@dataclass(frozen=True)
class Case:
    """Where the URL is set: variables in the environment and an env file of some kind."""

    environ: dict[str, str] = field(default_factory=dict)
    file: str | bytes | None = None
    """The env file's contents; None for no file at ROLLOUTD_ENV_FILE."""
    kind: str = "file"
    """``file``, ``directory`` (ROLLOUTD_ENV_FILE names one) or ``unreadable``."""

    def arrange(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """Set the variables and write the env file."""
        for name, value in self.environ.items():
            monkeypatch.setenv(name, value)
        env_file = tmp_path / "rolloutd.env"
        if self.kind == "directory":
            env_file.mkdir()
        elif self.file is not None:
            data = self.file.encode() if isinstance(self.file, str) else self.file
            env_file.write_bytes(data)
        if self.kind == "unreadable":
            env_file.chmod(0)
            # Root reads a file of mode 000 anyway; the check that skips it must not.
            real_access = os.access
            monkeypatch.setattr(
                os, "access", lambda path, mode: path != env_file and real_access(path, mode)
            )
        monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(env_file))


IN_ENV_FILE = f"{NAME}=sqlite:///from-file.db\n"

SAME_AS_SETTINGS = [
    pytest.param(Case(), id="nothing-set"),
    pytest.param(Case({NAME: "sqlite:///from-env.db"}), id="environment-only"),
    pytest.param(Case(file=IN_ENV_FILE), id="env-file-only"),
    pytest.param(Case({NAME: "sqlite:///from-env.db"}, IN_ENV_FILE), id="environment-wins"),
    pytest.param(Case({NAME: ""}, IN_ENV_FILE), id="empty-in-environment-wins"),
    pytest.param(Case({NAME.lower(): "sqlite:///lower.db"}), id="lower-case-in-environment"),
    pytest.param(Case(file="Rolloutd_Database_Url=sqlite:///mixed.db\n"), id="mixed-case-in-file"),
    pytest.param(
        Case({NAME: "sqlite:///same.db", NAME.lower(): "sqlite:///same.db"}),
        id="two-spellings-same-value",
    ),
    pytest.param(Case(file=None), id="env-file-missing"),
    pytest.param(Case(file=IN_ENV_FILE, kind="unreadable"), id="env-file-unreadable"),
    pytest.param(Case(kind="directory"), id="env-file-a-directory"),
    pytest.param(
        Case({NAME: "sqlite:///from-env.db"}, kind="directory"),
        id="env-file-a-directory-environment-set",
    ),
    pytest.param(Case(file=f'{NAME}="sqlite:///quoted db.db"\n'), id="double-quoted"),
    pytest.param(Case(file=f"{NAME}='sqlite:///${{HOME}}.db'\n"), id="single-quoted"),
    pytest.param(Case(file=f"export {NAME}=sqlite:///exported.db\n"), id="export-prefix"),
    pytest.param(Case(file=f"{NAME}=sqlite:///a.db  # old one\n"), id="trailing-comment"),
    pytest.param(
        Case({"DB_DIR": "/srv/db"}, f"{NAME}=sqlite:///${{DB_DIR}}/r.db\n"), id="interpolated"
    ),
    pytest.param(
        Case(file=f"{NAME}=sqlite:///first.db\n{NAME}=sqlite:///second.db\n"), id="set-twice"
    ),
    pytest.param(Case(file=f"{NAME}\n"), id="no-value-in-file"),
    pytest.param(Case(file="# only a comment\nROLLOUTD_LOG_LEVEL=info\n"), id="other-vars-only"),
    pytest.param(Case(file="\ufeff" + IN_ENV_FILE), id="byte-order-mark"),
]


@pytest.mark.parametrize("case", SAME_AS_SETTINGS)
def test_the_url_is_the_one_load_settings_reads(
    case: Case, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Wherever and however the URL is set, the fast reading gives what the settings give."""
    case.arrange(monkeypatch, tmp_path)

    url = configured_database_url()

    assert url is not None
    assert url == load_settings().database_url.get_secret_value()


IN_DOUBT = [
    pytest.param(
        Case({NAME: "sqlite:///upper.db", NAME.lower(): "sqlite:///lower.db"}),
        id="two-spellings-in-environment",
    ),
    pytest.param(
        Case(file=f"{NAME}=sqlite:///upper.db\n{NAME.lower()}=sqlite:///lower.db\n"),
        id="two-spellings-in-file",
    ),
    pytest.param(
        Case(file=f"{NAME}=sqlite:///upper.db\n{NAME.lower()}\n"),
        id="two-spellings-in-file-one-without-value",
    ),
]


@pytest.mark.parametrize("case", IN_DOUBT)
def test_two_spellings_with_different_values_are_left_to_the_settings(
    case: Case, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Which of two spellings pydantic-settings keeps depends on their order: None, and the
    settings still read one of them."""
    case.arrange(monkeypatch, tmp_path)

    assert configured_database_url() is None
    assert load_settings().database_url.get_secret_value() in {
        "sqlite:///upper.db",
        "sqlite:///lower.db",
        DEFAULT_DATABASE_URL,
    }


def test_an_env_file_that_is_not_utf8_is_left_to_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A binary env file gives None, and load_settings() reports it naming the file."""
    Case(file=b"\xff\xfe\x00" + IN_ENV_FILE.encode()).arrange(monkeypatch, tmp_path)

    assert configured_database_url() is None
    with pytest.raises(BadInput, match="not a UTF-8 text file"):
        load_settings()


def test_an_env_file_under_the_home_directory_is_left_to_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ROLLOUTD_ENV_FILE=~/rolloutd.env is checked as written (a ``~`` directory in the working
    directory) but read by pydantic-settings from the home directory: None."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    (home / "rolloutd.env").write_text(f"{NAME}=sqlite:///home.db\n")
    (here / "~").mkdir(parents=True)
    (here / "~" / "rolloutd.env").write_text(f"{NAME}=sqlite:///here.db\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "~/rolloutd.env")
    monkeypatch.chdir(here)

    assert configured_database_url() is None
    assert load_settings().database_url.get_secret_value() == "sqlite:///home.db"


def test_the_variable_is_the_settings_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name read is the one the settings derive for database_url, and with nothing set
    both give the same default."""
    assert variable("database_url") == NAME
    assert configured_database_url() == DEFAULT_DATABASE_URL
    assert load_settings().database_url.get_secret_value() == DEFAULT_DATABASE_URL


@pytest.mark.parametrize("where", ["environment", "env-file"])
def test_the_password_is_registered_as_load_settings_registers_it(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The URL's password, as written and percent-decoded, is hidden by scrub; the secrets
    registered are exactly those load_settings() registers."""
    url = "postgresql://ops:s3cr%40t-pass@db.internal/rolloutd"
    if where == "environment":
        Case({NAME: url}).arrange(monkeypatch, tmp_path)
    else:
        Case(file=f"{NAME}={url}\n").arrange(monkeypatch, tmp_path)

    assert configured_database_url() == url
    fast = set(redact._secrets)
    redact._secrets.clear()
    load_settings()

    assert fast == redact._secrets == {"s3cr%40t-pass", "s3cr@t-pass"}
    assert "s3cr" not in redact.scrub("connect as s3cr@t-pass and s3cr%40t-pass failed")


def test_a_bad_daemon_setting_does_not_stop_rolloutctl(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ROLLOUTD_LOG_LEVEL=verbose stops load_settings(), not `rolloutctl list`, which needs
    only the database URL."""
    url = f"sqlite:///{tmp_path / 'rolloutd.db'}"
    upgrade(url)
    ctl = Ctl.on(url, monkeypatch, capsys)
    monkeypatch.setenv("ROLLOUTD_LOG_LEVEL", "verbose")

    with pytest.raises(BadInput):
        load_settings()
    assert ctl.json("list") == []


def test_in_doubt_rolloutctl_reports_what_load_settings_reports(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With an env file that is not UTF-8, `rolloutctl list` falls back to the settings and
    refuses as bad input naming the file, as before."""
    Case(file=b"\xff\xfe\x00ROLLOUTD").arrange(monkeypatch, tmp_path)

    code, _, err = Ctl(capsys)("list")

    assert code == BAD_INPUT
    assert str(tmp_path / "rolloutd.env") in err and "not a UTF-8 text file" in err


def test_rolloutctl_list_reads_the_database_without_pydantic_settings(tmp_path: Path) -> None:
    """`rolloutctl list -o json` on a fresh SQLite database succeeds without importing
    pydantic-settings, nor python-dotenv when there is no env file."""
    url = f"sqlite:///{tmp_path / 'rolloutd.db'}"
    upgrade(url)
    code, present, out = imported_by(url, ["list", "-o", "json"], ("pydantic_settings", "dotenv"))
    assert (code, present, out.strip()) == (0, [], "[]")
