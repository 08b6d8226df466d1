"""Tests for systemd/rolloutd.service: it parses cleanly, stays hardened and keeps its contract.

``systemd-analyze`` works offline (no running systemd needed). Where it is missing the tests that
need it fail: a missing tool must not pass for a clean unit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from rolloutd import redact
from rolloutd.settings import Settings, load_settings
from tests.required import missing

SYSTEMD_DIR = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD_DIR / "rolloutd.service"
ENV_EXAMPLE = SYSTEMD_DIR / "rolloutd.env.example"
SHIPPED_EXEC_START = "/usr/local/bin/rolloutd run"
MAX_EXPOSURE = 2.0

# What systemd prints for a directive or section it does not understand or cannot parse.
PARSE_COMPLAINTS = ("Unknown key", "Unknown lvalue", "Unknown section", "Failed to parse")


def _need(program: str, remedy: str) -> str:
    """The path of ``program``; a missing one fails the test (see ``tests.required``)."""
    path = shutil.which(program)
    if path is None:
        missing(f"{program} not found", remedy)
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # info level so warnings are printed even if the caller's environment turned them down.
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "info", "SYSTEMD_LOG_COLOR": "0"}
    return subprocess.run(
        args, capture_output=True, text=True, encoding="utf-8", env=env, timeout=60, check=False
    )


def _directives(text: str) -> dict[tuple[str, str], list[str]]:
    """Every ``Key=value`` of a unit file by (section, key), in order; comments skipped."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        found[(section, key.strip())].append(value.strip())
    return found


@pytest.fixture(scope="module")
def unit_text() -> str:
    """The shipped unit file."""
    return UNIT.read_text()


@pytest.fixture(scope="module")
def service(unit_text: str) -> dict[str, list[str]]:
    """The [Service] directives of the shipped unit."""
    return {
        key: values
        for (section, key), values in _directives(unit_text).items()
        if section == "Service"
    }


@pytest.fixture
def verifiable_unit(unit_text: str, tmp_path: Path) -> Path:
    """A copy of the unit whose ExecStart names the installed console script, for ``verify``.

    ``systemd-analyze verify`` insists that ExecStart exists; the shipped path is where a
    system-wide install puts it, which this machine need not have. Only that line changes.
    """
    script = _need("rolloutd", "pip install -e .")
    copy = tmp_path / "rolloutd.service"
    copy.write_text(
        unit_text.replace(f"ExecStart={SHIPPED_EXEC_START}\n", f"ExecStart={script} run\n")
    )
    changed = [
        (old, new)
        for old, new in zip(unit_text.splitlines(), copy.read_text().splitlines(), strict=True)
        if old != new
    ]
    assert changed == [(f"ExecStart={SHIPPED_EXEC_START}", f"ExecStart={script} run")]
    return copy


def test_systemd_analyze_verify_accepts_the_unit(verifiable_unit: Path) -> None:
    """``systemd-analyze verify`` passes and complains about no key, section or value."""
    analyze = _need("systemd-analyze", "install the systemd package")
    result = _run(analyze, "verify", "--man=no", str(verifiable_unit))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for complaint in PARSE_COMPLAINTS:
        assert complaint not in output, output
    # Any other message tied to a line of the file is a parse problem too.
    assert not re.search(r"rolloutd\.service:\d+:", output), output


def test_security_exposure_is_below_two() -> None:
    """``systemd-analyze security --offline=yes`` rates the shipped unit's exposure below 2.0."""
    analyze = _need("systemd-analyze", "install the systemd package")
    result = _run(analyze, "security", "--offline=yes", "--no-pager", str(UNIT))
    match = re.search(
        r"Overall exposure level for rolloutd\.service: (\d+(?:\.\d+)?)", result.stdout
    )
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) < MAX_EXPOSURE, result.stdout


def test_unit_is_a_notify_service_with_a_watchdog(service: dict[str, list[str]]) -> None:
    """The daemon reports readiness and liveness itself, and only its main process may."""
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["WatchdogSec"] == ["30s"]


def test_unit_restarts_on_failure_and_stops_in_time(service: dict[str, list[str]]) -> None:
    """Crashes restart the daemon; SIGTERM gets 15 s before systemd escalates."""
    assert service["Restart"] == ["on-failure"]
    assert service["RestartSec"] == ["2s"]
    assert service["KillSignal"] == ["SIGTERM"]
    assert service["TimeoutStopSec"] == ["15s"]
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_unit_runs_the_installed_console_script(service: dict[str, list[str]]) -> None:
    """The shipped ExecStart is the system-wide console script's path, running the daemon."""
    assert service["ExecStart"] == [SHIPPED_EXEC_START]


def test_unit_reads_settings_from_the_env_file(service: dict[str, list[str]]) -> None:
    """Settings come from /etc/rolloutd/rolloutd.env, the daemon's documented default."""
    assert service["EnvironmentFile"] == ["/etc/rolloutd/rolloutd.env"]


def test_daemon_skips_the_env_file_the_unit_already_loaded(
    service: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the unit's ROLLOUTD_ENV_FILE the daemon takes settings from its environment only."""
    (assignment,) = [
        value for value in service["Environment"] if value.startswith("ROLLOUTD_ENV_FILE=")
    ]
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", assignment.partition("=")[2])
    monkeypatch.setenv("ROLLOUTD_LOG_LEVEL", "debug")
    assert load_settings().log_level == "debug"


def test_unit_keeps_state_in_its_own_directory(service: dict[str, list[str]]) -> None:
    """The default SQLite file lands in the dynamic user's persistent state directory."""
    assert service["DynamicUser"] == ["yes"]
    assert service["StateDirectory"] == ["rolloutd"]
    assert service["WorkingDirectory"] == ["/var/lib/rolloutd"]


def test_unit_leaves_networking_open(service: dict[str, list[str]]) -> None:
    """No IP deny list or private network: Postgres, Prometheus and Slack must stay reachable."""
    assert "IPAddressDeny" not in service
    assert "PrivateNetwork" not in service
    assert service["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]


def test_unit_orders_after_network_time_sync_and_postgres(unit_text: str) -> None:
    """It starts once the network is online, after the clock is synchronised (rollout time is
    anchored to the wall clock at start-up) and after a local Postgres."""
    unit = _directives(unit_text)
    assert unit[("Unit", "After")] == ["network-online.target time-sync.target postgresql.service"]
    assert unit[("Unit", "Wants")] == ["network-online.target"]
    assert unit[("Install", "WantedBy")] == ["multi-user.target"]


def test_env_example_sets_only_known_settings() -> None:
    """Every variable in the example env file names a field of Settings (no typos)."""
    assignments = dict(
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )
    prefix = Settings.model_config["env_prefix"]
    assert set(assignments) == {
        "ROLLOUTD_DATABASE_URL",
        "ROLLOUTD_HEALTH_PORT",
        "ROLLOUTD_LEASE_TTL_SECONDS",
        "ROLLOUTD_LOG_LEVEL",
    }
    assert {name.removeprefix(prefix).lower() for name in assignments} <= set(Settings.model_fields)
    assert "0600" in ENV_EXAMPLE.read_text()


def test_env_example_parses_as_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example file, read as rolloutd reads its env file, yields valid settings."""
    for name in list(os.environ):
        if name.startswith("ROLLOUTD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(ENV_EXAMPLE))
    # load_settings registers the example password; keep it out of the process-wide registry.
    monkeypatch.setattr(redact, "_secrets", set())
    settings = load_settings()
    assert settings.health_port == 9467
    assert settings.lease_ttl_seconds == 15
    assert settings.database_url.get_secret_value().startswith("postgresql://rolloutd:")
