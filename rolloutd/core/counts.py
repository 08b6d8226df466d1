"""Counts in words: a number and its noun, singular or plural as the number says.

Gate reasons, events and alerts are read by people (``rolloutctl status``, the history, Slack):
"1 OOM event" and "2 OOM events", "1 sample of the 100 needed", never "1 oom_events". A signal
that counts events is named by what it counts, not by its metric name.
"""

from __future__ import annotations

# What each event-counting signal of the gate templates counts, as (one, many).
EVENT_NOUNS: dict[str, tuple[str, str]] = {
    "oom_events": ("OOM event", "OOM events"),
    "errors": ("failed request", "failed requests"),
    "queue_timeouts": ("queue timeout", "queue timeouts"),
    "schema_violations": ("schema violation", "schema violations"),
    "escalations": ("escalation to a human", "escalations to a human"),
}


def counted(count: float, one: str, many: str | None = None) -> str:
    """``count`` and its noun: ``one`` for exactly 1, else ``many`` (default ``one`` + s)."""
    noun = one if count == 1 else (many if many is not None else f"{one}s")
    return f"{count:g} {noun}"


def events_counted(signal: str, count: float) -> str:
    """``count`` events of ``signal`` in words: ``1 OOM event``, ``3 engine restarts``."""
    one, many = EVENT_NOUNS.get(signal) or _nouns_of(signal)
    return counted(count, one, many)


def _nouns_of(signal: str) -> tuple[str, str]:
    """A signal the table does not know, named after itself: ``engine_restarts`` counts
    ``engine restart``\\ s; a name that is no plural counts its events."""
    words = signal.replace("_", " ")
    if words.endswith("s") and not words.endswith("ss"):
        return words[:-1], words
    return f"{words} event", f"{words} events"
