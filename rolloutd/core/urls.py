"""Whether a URL from a plan or the command line can be connected to, in words if not."""

from __future__ import annotations

from urllib.parse import urlsplit


def url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as an HTTP endpoint, or None: it must be an http:// or
    https:// URL with a host and, if it names one, a port from 1 to 65535."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        # urlsplit's own words: "Invalid IPv6 URL", "Port out of range 0-65535", ...
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "expected an http:// or https:// URL"
    if any(char.isspace() or not char.isprintable() for char in url):
        return "expected a URL without spaces or control characters"
    if not parts.hostname:
        return "the URL names no host"
    if port == 0:
        return "port 0 cannot be connected to"
    return None
