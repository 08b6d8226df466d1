"""Keeping secrets out of every message: a registry of known secrets and a scrubber.

Settings register the database password and webhook URLs as soon as they are read;
the CLI's error boundary and the log processors pass every line through :func:`scrub`,
so even an error text from a driver that quotes its connection string shows ``***``.
"""

from __future__ import annotations

import re

_secrets: set[str] = set()
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]*):(?P<pw>[^@\s/]+)@")


def register_secret(secret: str | None) -> None:
    """Remember ``secret`` so that :func:`scrub` hides it wherever it appears."""
    if secret and len(secret) >= 4:
        _secrets.add(secret)


def scrub(text: str) -> str:
    """``text`` with every registered secret and every password in a URL replaced by ``***``."""
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_PASSWORD.sub(r"\g<scheme>:***@", text)
