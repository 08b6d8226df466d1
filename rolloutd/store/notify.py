"""Postgres LISTEN/NOTIFY for the daemon's command listener: a connection of its own, and the
payloads that arrive on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

ListenError = psycopg.Error
"""What a lost or refused listening connection raises: expected, and cured by connecting
again."""

CONNECT_TIMEOUT_SECONDS = 5

Listening = psycopg.Connection[Any]
"""An open connection that can LISTEN."""


def connect(conninfo: str, *, application_name: str | None = None) -> Listening:
    """An autocommit connection that notices a vanished peer within seconds (keepalives)."""
    options: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 2,
    }
    if application_name is not None:
        options["application_name"] = application_name
    return psycopg.connect(conninfo, **options)


def listen(conn: Listening, channel: str) -> None:
    """Start listening on ``channel``."""
    conn.execute(f"LISTEN {channel}")


def receive(conn: Listening, timeout: float) -> Iterator[str]:
    """The payloads of the NOTIFYs that arrive within ``timeout`` seconds."""
    for note in conn.notifies(timeout=timeout):
        yield note.payload
