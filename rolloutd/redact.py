"""Keeping secrets out of every message: a registry of known secrets and a scrubber.

Settings register the database password and webhook URLs as soon as they are read;
the CLI's error boundary and the log processors pass every line through :func:`scrub`,
so even an error text from a driver that quotes its connection string shows ``***``.
Log events carry more than strings (a dict of a webhook's response, a list of argv, an
exception), so :func:`scrub_value` walks them and scrubs every string it finds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_secrets: set[str] = set()
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]*):(?P<pw>[^@\s/]+)@")
# Deeper than any event rolloutd logs; past it a value is scrubbed as text, which also ends
# the walk of a structure that contains itself.
_MAX_DEPTH = 16


def register_secret(secret: str | None) -> None:
    """Remember ``secret`` so that :func:`scrub` hides it wherever it appears."""
    if secret and len(secret) >= 4:
        _secrets.add(secret)


def scrub(text: str) -> str:
    """``text`` with every registered secret and every password in a URL replaced by ``***``."""
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_PASSWORD.sub(r"\g<scheme>:***@", text)


def scrub_value(value: object, *, _depth: int = 0) -> object:
    """``value`` with :func:`scrub` applied to every string inside it; ``value`` is not changed.

    Mappings (string keys too), lists, tuples and sets are rebuilt with their items scrubbed; an
    exception becomes ``"TypeName: message"``; numbers, booleans and None pass through; any
    other object becomes its scrubbed ``repr``, which is what a log renderer would print.
    """
    if isinstance(value, str):
        return scrub(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if _depth >= _MAX_DEPTH:
        return scrub(repr(value))
    depth = _depth + 1
    if isinstance(value, Mapping):
        return {
            scrub(key) if isinstance(key, str) else key: scrub_value(item, _depth=depth)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        items = [scrub_value(item, _depth=depth) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, set | frozenset):
        return [scrub_value(item, _depth=depth) for item in value]
    if isinstance(value, BaseException):
        # Scrubbed before any quoting, so that a secret with a quote or a backslash in it
        # still matches.
        return f"{type(value).__name__}: {scrub(str(value))}"
    return scrub(repr(value))
