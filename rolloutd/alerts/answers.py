"""What the sender keeps of a webhook's answer: a short excerpt, one printable line, that
shows nothing of the webhook's URL.

The path of a Slack webhook is its secret, and a server that does not know the webhook may
say so by repeating the path: a stock 404 page ("The requested URL /services/... was not
found"), an error naming the token, a redirect to the same path elsewhere, an HTTP client's
error quoting a status line it could not parse. Every text the sender derives from an answer
or a failed request passes :func:`excerpt` before it is logged, stored or put in an event,
so the outbox row, the audit log and ``rolloutctl history`` hold no fragment of the path.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import urlsplit

import httpx

from rolloutd.redact import hide_fragments, scrub

# Slack answers in a word ("ok", "no_service"); more than this is a page nobody reads whole,
# and a body can be any size.
READ_LIMIT = 4096
EXCERPT_LIMIT = 120
# Replaced by a space: control characters (line breaks, escape sequences, NUL) and the
# Unicode line and paragraph separators. Dropped: format characters, which are invisible
# (bidi overrides, zero-width spaces) and could otherwise split a fragment of the path.
_BREAKS = frozenset({"Cc", "Zl", "Zp"})
_INVISIBLE = "Cf"


def read_start(response: httpx.Response, limit: int = READ_LIMIT) -> bytes:
    """The first ``limit`` bytes of the (decompressed) body of a streamed ``response``; the
    rest is never read.

    :raises httpx.HTTPError: when reading fails (the connection breaks, a read times out).
    """
    start = bytearray()
    for chunk in response.iter_bytes():
        start += chunk
        if len(start) >= limit:
            break
    return bytes(start[:limit])


def excerpt(said: str | bytes, url: str, *, limit: int = EXCERPT_LIMIT) -> str:
    """``said`` (a body, or an error's text) as one line of at most ``limit`` characters,
    with every secret and every fragment of ``url``'s path and query hidden.

    Bytes that are not UTF-8 become U+FFFD; control characters become spaces, runs of
    whitespace one space; invisible format characters are dropped.
    """
    text = said.decode("utf-8", errors="replace") if isinstance(said, bytes) else said
    secret = _request_target(url)
    printable = _one_line(hide_fragments(scrub(text), secret))
    # Once more, for a fragment that the dropped invisible characters had split in two.
    shown = hide_fragments(printable, secret)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _request_target(url: str) -> str:
    """The part of ``url`` that a server sees in the request line: path and query."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # path and host cannot be told apart: treat it all as the secret
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _one_line(text: str) -> str:
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if category == _INVISIBLE:
            continue
        kept.append(" " if category in _BREAKS else char)
    return " ".join("".join(kept).split())
