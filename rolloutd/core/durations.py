"""Durations as operators write them in plans: ``48h``, ``90m``, ``1h30m``, ``2d``, ``500ms``
(and PromQL's units, a year of 365 days included)."""

from __future__ import annotations

import re
from datetime import timedelta

_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31_536_000.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d|w|y)\s*)+")


def parse_duration(text: str) -> timedelta:
    """Parse ``text`` into a timedelta.

    :raises ValueError: when the text is not a sequence of number+unit parts.
    """
    compact = text.strip()
    if not compact or not _WHOLE.fullmatch(compact):
        raise ValueError(
            f"expected a duration such as '30s', '90m', '48h', '1h30m' or '2d', got {text!r}"
        )
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(compact))
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long") from None


def format_duration(delta: timedelta) -> str:
    """Render a timedelta compactly, the inverse of :func:`parse_duration` to the millisecond."""
    total = round(delta.total_seconds() * 1000)
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
