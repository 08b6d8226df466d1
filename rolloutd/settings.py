"""Daemon and CLI settings: environment variables prefixed ``ROLLOUTD_`` and an env file.

The env file is ``/etc/rolloutd/rolloutd.env`` (the systemd unit's EnvironmentFile) or the
path in ``ROLLOUTD_ENV_FILE``; variables set in the environment win over the file.
The database URL is a secret (it may carry a password), so it is a ``SecretStr``: its
repr and any log line show ``**********``, and only the store layer unwraps it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from rolloutd.errors import BadInput, Problem
from rolloutd.redact import register_secret

DEFAULT_ENV_FILE = "/etc/rolloutd/rolloutd.env"


class Settings(BaseSettings):
    """Everything rolloutd reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="ROLLOUTD_", extra="ignore")

    database_url: SecretStr = SecretStr("sqlite:///rolloutd.db")
    health_host: str = "127.0.0.1"
    health_port: int = Field(default=9467, ge=0, le=65535)
    lease_ttl_seconds: float = Field(default=15.0, ge=2.0)
    log_level: str = "info"
    instance_name: str | None = None
    alert_timeout_seconds: float = Field(default=10.0, gt=0.0, le=120.0)


def load_settings() -> Settings:
    """Read settings from the environment and the env file.

    :raises BadInput: naming the variable when a value has the wrong form.
    """
    env_file = os.environ.get("ROLLOUTD_ENV_FILE", DEFAULT_ENV_FILE)
    # Under systemd the unit's EnvironmentFile= already put the file's values in the
    # environment, and the file (mode 0600, root) is not readable by the service user.
    path = Path(env_file)
    source = env_file if path.is_file() and os.access(path, os.R_OK) else None
    try:
        settings = Settings(_env_file=source)
    except ValidationError as exc:
        problems = [
            Problem(
                source or "environment",
                "ROLLOUTD_" + "_".join(str(p) for p in err["loc"]).upper(),
                f"{err['msg'].lower()}, got {err.get('input')!r}"
                if "database" not in str(err["loc"])
                else err["msg"].lower(),
            )
            for err in exc.errors()
        ]
        raise BadInput(problems) from None
    _register_secrets(settings)
    return settings


def _register_secrets(settings: Settings) -> None:
    url = settings.database_url.get_secret_value()
    match = re.match(r"^[a-z][a-z0-9+.-]*://[^:/@]*:([^@/]+)@", url)
    if match:
        register_secret(match.group(1))
        register_secret(unquote(match.group(1)))
