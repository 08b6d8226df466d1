"""The database URL alone, read without pydantic-settings, so that a read command starts fast.

Every ``rolloutctl`` command that opens the database needs its URL and nothing else of
:class:`rolloutd.settings.Settings`. Importing pydantic-settings and building those settings
took 180 ms on a development machine, more than all the rest of ``rolloutctl status``.
:func:`configured_database_url` reads ``ROLLOUTD_DATABASE_URL`` by the rules pydantic-settings
applies to ``Settings`` (the variable's name in any letter case; the environment over the env
file, which python-dotenv parses; else the default), and returns None whenever the answer is in
any doubt, for the caller to fall back to :func:`rolloutd.settings.load_settings`, which reads
it as before and reports whatever is wrong.

Whoever takes the URL from here skips the checks of the daemon's other variables: a bad
``ROLLOUTD_LOG_LEVEL`` does not stop ``rolloutctl list``, only ``rolloutd run``.

The env file's location and the rule that registers the URL's password as a secret live here,
and the settings use them too, so both ways of reading agree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote

from rolloutd.redact import register_secret

VARIABLE = "ROLLOUTD_DATABASE_URL"
DEFAULT_DATABASE_URL = "sqlite:///rolloutd.db"
DEFAULT_ENV_FILE = "/etc/rolloutd/rolloutd.env"

_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^:/@]*:([^@/]+)@")


class _InDoubt(Exception):
    """pydantic-settings might read another URL than this module would."""


def configured_database_url() -> str | None:
    """The database URL the settings would hold, its password registered as a secret; None
    when that is in doubt (two spellings of the variable with different values, an env file
    that is not UTF-8, anything that raised)."""
    try:
        url = _database_url()
    # Deliberately broad: whatever went wrong here, load_settings() meets it too, and turns
    # it into the message the operator sees today.
    except Exception:
        return None
    register_password(url)
    return url


def readable_env_file() -> str | None:
    """The env file to read: ``ROLLOUTD_ENV_FILE``, else :data:`DEFAULT_ENV_FILE`, if it is a
    regular file this process may read; else None."""
    env_file = os.environ.get("ROLLOUTD_ENV_FILE", DEFAULT_ENV_FILE)
    # Under systemd the unit's EnvironmentFile= already put the file's values in the
    # environment, and the file (mode 0600, root) is not readable by the service user.
    path = Path(env_file)
    return env_file if path.is_file() and os.access(path, os.R_OK) else None


def register_password(url: str) -> None:
    """Register the password in ``url``, if any, as it is written and percent-decoded."""
    match = _PASSWORD.match(url)
    if match:
        register_secret(match.group(1))
        register_secret(unquote(match.group(1)))


def _database_url() -> str:
    """:raises _InDoubt: when pydantic-settings might read another value."""
    url = _lookup(os.environ)
    if url is None:
        env_file = readable_env_file()
        if env_file is not None:
            url = _lookup(_file_values(env_file))
    return DEFAULT_DATABASE_URL if url is None else url


def _lookup(variables: Mapping[str, str | None]) -> str | None:
    """The value of :data:`VARIABLE`, its name in any letter case; None when it is not set or
    has no value (a line without ``=`` in a file).

    :raises _InDoubt: when two spellings of the name have different values: pydantic-settings
        lower-cases the names into one dict, so which one it keeps depends on their order.
    """
    wanted = VARIABLE.lower()
    values = {value for name, value in variables.items() if name.lower() == wanted}
    if len(values) > 1:
        raise _InDoubt(f"{len(values)} values of {VARIABLE}")
    return next(iter(values), None)


def _file_values(env_file: str) -> Mapping[str, str | None]:
    """The variables in ``env_file``, parsed as pydantic-settings' ``DotEnvSettingsSource``
    parses it.

    :raises UnicodeDecodeError: when the file is not UTF-8.
    :raises _InDoubt: when pydantic-settings would read another file.
    """
    if env_file.startswith("~"):
        # pydantic-settings reads it from the home directory, but load_settings() checks
        # whether the path is readable as written.
        raise _InDoubt(f"{env_file} starts with ~")
    # Imported only when there is a file to parse: 10 to 15 ms of rolloutctl's start.
    from dotenv import dotenv_values

    return dotenv_values(Path(env_file), encoding="utf8")
