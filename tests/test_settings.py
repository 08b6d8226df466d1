"""Settings: a bad value is refused with the variable's name and where it came from, never a
traceback; SIGHUP's split between what reloads and what waits for a restart."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from rolloutd import redact
from rolloutd.cli.daemon import cli
from rolloutd.cli.errors import BAD_INPUT, run_cli
from rolloutd.errors import BadInput
from rolloutd.settings import RELOADABLE, Settings, load_settings, needs_restart, variable


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No ROLLOUTD_* variable from the caller's environment, and no env file."""
    for name in [name for name in os.environ if name.startswith("ROLLOUTD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.setattr(redact, "_secrets", set())
    yield


def test_the_log_level_is_one_of_four_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """DEBUG, Info and warning are accepted (as lower case); the default is info."""
    assert load_settings().log_level == "info"
    for given, read in [("DEBUG", "debug"), (" Info ", "info"), ("warning", "warning")]:
        monkeypatch.setenv("ROLLOUTD_LOG_LEVEL", given)
        assert load_settings().log_level == read


def test_an_unknown_log_level_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ROLLOUTD_LOG_LEVEL=verbose is bad input naming the variable and the accepted values."""
    monkeypatch.setenv("ROLLOUTD_LOG_LEVEL", "verbose")

    with pytest.raises(BadInput) as refused:
        load_settings()

    (problem,) = refused.value.problems
    assert (problem.source, problem.field) == ("environment", "ROLLOUTD_LOG_LEVEL")
    assert "'debug', 'info', 'warning' or 'error'" in problem.message
    assert "'verbose'" in problem.message


def test_a_bad_value_in_the_env_file_is_reported_with_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each bad value read from the env file is one problem naming the file and the variable;
    one set in the environment too is reported as coming from there (it wins)."""
    env_file = tmp_path / "rolloutd.env"
    env_file.write_text("ROLLOUTD_LOG_LEVEL=loud\nROLLOUTD_HEALTH_PORT=99999\n")
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(env_file))
    monkeypatch.setenv("ROLLOUTD_HEALTH_PORT", "70000")

    with pytest.raises(BadInput) as refused:
        load_settings()

    where = {problem.field: problem.source for problem in refused.value.problems}
    assert where == {"ROLLOUTD_LOG_LEVEL": str(env_file), "ROLLOUTD_HEALTH_PORT": "environment"}


def test_an_env_file_that_is_not_text_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A binary file given as the env file is refused naming the file, not a decoding crash."""
    env_file = tmp_path / "rolloutd.env"
    env_file.write_bytes(b"\xff\xfe\x00ROLLOUTD")
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(env_file))

    with pytest.raises(BadInput, match="not a UTF-8 text file") as refused:
        load_settings()

    assert refused.value.problems[0].source == str(env_file)


def test_rolloutd_run_with_a_bad_setting_exits_2_with_one_line_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``rolloutd run`` refuses ROLLOUTD_LOG_LEVEL=verbose before starting: exit 2, one line."""
    monkeypatch.setenv("ROLLOUTD_LOG_LEVEL", "verbose")
    # Were the value accepted, the daemon would start on this (schema-less) database and stop.
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", f"sqlite:///{tmp_path / 'rolloutd.db'}")

    code = run_cli(cli, "rolloutd", ["run"])

    err = capsys.readouterr().err
    assert code == BAD_INPUT
    assert err.startswith("rolloutd: environment: ROLLOUTD_LOG_LEVEL: input should be")
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_needs_restart_names_only_changed_settings_that_do_not_reload() -> None:
    """A new log level and TTL reload; a new port or database URL is named as needing a restart."""
    running = Settings()
    fresh = Settings(
        log_level="debug",
        lease_ttl_seconds=30,
        health_port=9999,
        database_url=SecretStr("sqlite:///b.db"),
    )

    assert needs_restart(running, fresh) == ["ROLLOUTD_DATABASE_URL", "ROLLOUTD_HEALTH_PORT"]
    assert needs_restart(running, Settings(log_level="error", lease_ttl_seconds=5)) == []
    assert [variable(field) for field in RELOADABLE] == [
        "ROLLOUTD_LOG_LEVEL",
        "ROLLOUTD_LEASE_TTL_SECONDS",
    ]
