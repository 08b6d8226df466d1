"""Daemon and CLI settings: environment variables prefixed ``ROLLOUTD_`` and an env file.

The env file is ``/etc/rolloutd/rolloutd.env`` (the systemd unit's EnvironmentFile) or the
path in ``ROLLOUTD_ENV_FILE``; variables set in the environment win over the file.
The database URL is a secret (it may carry a password), so it is a ``SecretStr``: its
repr and any log line show ``**********``, and only the store layer unwraps it.
A running daemon re-reads its settings on SIGHUP, but applies only the :data:`RELOADABLE`
ones; :func:`needs_restart` names the others that changed.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from rolloutd.core.durations import parse_duration
from rolloutd.database_url import DEFAULT_DATABASE_URL, readable_env_file, register_password
from rolloutd.errors import BadInput, Problem
from rolloutd.redact import register_secret

LogLevel = Literal["debug", "info", "warning", "error"]

# What SIGHUP changes in a running daemon. The other settings are bound at start to the
# database engine, the health socket, the lease holder's name and the alert HTTP client.
RELOADABLE = ("log_level", "lease_ttl_seconds")


class Settings(BaseSettings):
    """Everything rolloutd reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="ROLLOUTD_", extra="ignore")

    database_url: SecretStr = SecretStr(DEFAULT_DATABASE_URL)
    health_host: str = "127.0.0.1"
    health_port: int = Field(default=9467, ge=0, le=65535)
    lease_ttl_seconds: float = Field(default=15.0, ge=2.0)
    log_level: LogLevel = "info"
    instance_name: str | None = None
    alert_timeout_seconds: float = Field(default=10.0, gt=0.0, le=120.0)
    # How long the evaluations of an ended rollout are kept whole (``90d``, ``12w``); after
    # that they are compacted to the decisive ones (``rolloutd db compact``, daily).
    retention: timedelta = timedelta(days=90)
    # The web view's token, required when health_host is not a loopback address.
    ui_token: SecretStr | None = None
    # Where operators reach the web view (https://rolloutd.example/), for links in alerts.
    ui_url: str | None = None

    @field_validator("retention", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                retention = parse_duration(value)
            except ValueError:
                # pydantic reports the variable and the value given.
                raise ValueError("expected a duration such as '90d' or '12w'") from None
            if retention <= timedelta(0):
                raise ValueError("must be longer than 0s")
            return retention
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        # Operators write INFO as often as info; anything else is still refused.
        return value.strip().lower() if isinstance(value, str) else value


def load_settings() -> Settings:
    """Read settings from the environment and the env file.

    :raises BadInput: naming the variable when a value has the wrong form.
    """
    source = readable_env_file()
    try:
        settings = Settings(_env_file=source)
    except ValidationError as exc:
        raise BadInput([_problem(err, source) for err in exc.errors()]) from None
    except UnicodeDecodeError:
        # Only the env file is decoded, so there is one.
        raise BadInput.one(str(source), "", "not a UTF-8 text file of VAR=value lines") from None
    _register_secrets(settings)
    return settings


def variable(field: str) -> str:
    """The environment variable that sets ``field``."""
    return (Settings.model_config.get("env_prefix", "") + field).upper()


def needs_restart(running: Settings, fresh: Settings) -> list[str]:
    """The variables whose new value in ``fresh`` a daemon started with ``running`` ignores."""
    return [
        variable(field)
        for field in Settings.model_fields
        if field not in RELOADABLE and getattr(running, field) != getattr(fresh, field)
    ]


def _problem(err: ErrorDetails, env_file: str | None) -> Problem:
    """One invalid setting, named by its variable and the place it came from."""
    variable_name = variable("_".join(str(p) for p in err["loc"]))
    # The environment wins over the file, so a variable set in both was read from the former.
    where = env_file if env_file is not None and variable_name not in os.environ else "environment"
    message = err["msg"].lower()
    # The database URL may carry a password: never echo it.
    if "database" not in variable_name.lower():
        message += f", got {err.get('input')!r}"
    return Problem(where, variable_name, message)


def _register_secrets(settings: Settings) -> None:
    if settings.ui_token is not None:
        register_secret(settings.ui_token.get_secret_value())
    register_password(settings.database_url.get_secret_value())
