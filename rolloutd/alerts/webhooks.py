"""Finding a channel's webhook URL: the daemon's environment first, then its env file.

A plan names the variable (``webhook_env: SLACK_WEBHOOK_OPS``), never the URL. Under systemd
the unit's ``EnvironmentFile=`` puts the file's values in the environment; a daemon started by
hand with ``ROLLOUTD_ENV_FILE`` reads the file itself. Every URL found is registered as a
secret, so no log line, event or error can show it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from rolloutd.database_url import DEFAULT_ENV_FILE
from rolloutd.redact import register_secret


class Webhooks:
    """Resolves webhook variables to URLs, re-reading the env file when it changes."""

    def __init__(
        self,
        env_file: str | None = None,
        *,
        environ: Callable[[], Mapping[str, str]] = lambda: os.environ,
    ) -> None:
        self.env_file = env_file or os.environ.get("ROLLOUTD_ENV_FILE", DEFAULT_ENV_FILE)
        self._environ = environ
        self._file_values: dict[str, str] = {}
        self._file_stamp: float | None = None

    def url(self, variable: str) -> str | None:
        """The URL in ``variable``, or None when it is unset or not an http(s) URL."""
        value = self._environ().get(variable) or self._from_file(variable)
        if not value:
            return None
        register_secret(value)
        return value if value.startswith(("https://", "http://")) else None

    def problem(self, variable: str) -> str:
        """Why ``variable`` gives no URL, in words that do not show its value."""
        value = self._environ().get(variable) or self._from_file(variable)
        if value:
            return f"{variable} does not hold an http(s) URL"
        return f"{variable} is not set in rolloutd's environment or {self.env_file}"

    def _from_file(self, variable: str) -> str | None:
        path = Path(self.env_file)
        try:
            stamp = path.stat().st_mtime
        except OSError:
            return None
        if stamp != self._file_stamp:
            from dotenv import dotenv_values

            try:
                values = dotenv_values(path)
            except OSError:
                return None
            self._file_values = {k: v for k, v in values.items() if v is not None}
            self._file_stamp = stamp
        return self._file_values.get(variable)
