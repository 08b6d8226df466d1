"""Keeping secrets out of every message: a registry of known secrets and a scrubber.

Settings register the database password and webhook URLs as soon as they are read;
the CLI's error boundary and the log processors pass every line through :func:`scrub`,
so even an error text from a driver that quotes its connection string shows ``***``.
Log events carry more than strings (a dict of a webhook's response, a list of argv, an
exception), so :func:`scrub_value` walks them and scrubs every string it finds.

A server can also repeat part of a secret: a webhook's 404 page quotes the request path,
which for Slack holds the token, perhaps lower-cased or percent-encoded. :func:`hide_fragments`
hides every long enough piece of a secret however it is written; it is for text that came
from the holder of that secret, since short words of a URL path are common elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

_secrets: set[str] = set()
# The scheme starts where a run of scheme characters starts: a match tried inside the run
# would scan it again, which makes a long word take quadratic time.
_URL_PASSWORD = re.compile(
    r"(?<![a-z0-9+.-])(?P<scheme>[a-z0-9+.-]+://[^:/@\s]*):(?P<pw>[^@\s/]+)@"
)
# Deeper than any event rolloutd logs; past it a value is scrubbed as text, which also ends
# the walk of a structure that contains itself.
_MAX_DEPTH = 16
# Fewer characters than this, alone, give away too little of a secret to hide (a word like
# ``services`` in a Slack path has eight).
SHORTEST_FRAGMENT = 8
# How a server may write a character of the path it repeats: percent-encoded, escaped as in
# JSON (``\/``, ``\u002f``) or in a bytes repr (``\x2f``), or as an HTML character reference.
_ESCAPE = re.compile(
    r"%(?P<pct>[0-9a-fA-F]{2})|\\x(?P<byte>[0-9a-fA-F]{2})|\\(?P<slash>/)"
    r"|\\u(?P<u>[0-9a-fA-F]{4})|&#(?P<dec>[0-9]{1,7});|&#[xX](?P<hex>[0-9a-fA-F]{1,6});"
    r"|&(?P<name>amp|lt|gt|quot|apos);"
)
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def register_secret(secret: str | None) -> None:
    """Remember ``secret`` so that :func:`scrub` hides it wherever it appears."""
    if secret and len(secret) >= 4:
        _secrets.add(secret)


def scrub(text: str) -> str:
    """``text`` with every registered secret and every password in a URL replaced by ``***``."""
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_PASSWORD.sub(r"\g<scheme>:***@", text)


def hide_fragments(text: str, secret: str, *, shortest: int = SHORTEST_FRAGMENT) -> str:
    """``text`` with every run of at least ``shortest`` characters of ``secret`` replaced by
    ``***``, whatever letter case and escaping (see ``_ESCAPE``) ``text`` writes it in; every
    other character is kept as it was.
    """
    pieces = _pieces(secret, shortest)
    if not pieces:
        return text
    canonical, spans = _canonical(text)
    hidden: list[tuple[int, int]] = []
    for i in range(len(canonical) - shortest + 1):
        if canonical[i : i + shortest] not in pieces:
            continue
        start, end = spans[i][0], spans[i + shortest - 1][1]
        if hidden and start <= hidden[-1][1]:
            hidden[-1] = (hidden[-1][0], max(end, hidden[-1][1]))
        else:
            hidden.append((start, end))
    if not hidden:
        return text
    kept, last = [], 0
    for start, end in hidden:
        kept += [text[last:start], "***"]
        last = end
    return "".join([*kept, text[last:]])


@lru_cache(maxsize=64)
def _pieces(secret: str, length: int) -> frozenset[str]:
    """Every run of ``length`` characters of ``secret``, in canonical form: a longer run of
    ``secret`` in a text covers only runs of ``length`` that are in this set, and vice versa."""
    canonical, _ = _canonical(secret)
    return frozenset(canonical[i : i + length] for i in range(len(canonical) - length + 1))


def _canonical(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``text`` unescaped and lower-cased, with one character per UTF-8 byte of a non-ASCII
    character (as a URL carries it percent-encoded), and for each canonical character the
    span of ``text`` it came from."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < len(text):
        escape = _ESCAPE.match(text, pos)
        form = _unescaped(escape) if escape else None
        end = escape.end() if escape and form is not None else pos + 1
        if form is None:
            form = _url_form(text[pos])
        out.append(form)
        spans += [(pos, end)] * len(form)
        pos = end
    return "".join(out), spans


def _unescaped(escape: re.Match[str]) -> str | None:
    """The canonical form of the character ``escape`` stands for; None if it stands for none."""
    if escape["pct"] or escape["byte"]:
        value = int(escape["pct"] or escape["byte"], 16)
        # A byte of a multi-byte character stays a byte: the form a URL gives it.
        return chr(value).lower() if value < 0x80 else _byte(value)
    if escape["slash"]:
        return "/"
    if escape["name"]:
        return _NAMED[escape["name"]]
    number = escape["u"] or escape["hex"]
    value = int(number, 16) if number else int(escape["dec"])
    return _url_form(chr(value)) if value <= 0x10FFFF else None


def _url_form(char: str) -> str:
    if char.isascii():
        return char.lower()
    return "".join(_byte(byte) for byte in char.encode("utf-8", "surrogatepass"))


def _byte(value: int) -> str:
    """A byte past ASCII as one character that no ASCII character can be confused with."""
    return chr(0x100 + value)


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
