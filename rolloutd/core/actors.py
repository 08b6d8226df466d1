"""Who acted, as the audit log and the alerts name them: the claimed name beside the proven role.

``rolloutctl`` records the operator's name from ``SUDO_USER`` or the OS user, which anyone can
set. On Postgres the database also records the role the command was inserted under, which no
client can choose (migration 0013). Where the two differ, every view and alert shows both, so a
forged name never stands alone.
"""

from __future__ import annotations

from typing import Final

ACTOR_LENGTH: Final = 200
"""The longest actor an event row holds."""


def acting(claimed: str, db_role: str | None) -> str:
    """``claimed``, followed by ``(as db role ROLE)`` when the database role is known and
    differs from it; the claimed part is shortened so that the whole fits an event's actor."""
    if not db_role or db_role == claimed:
        return claimed[:ACTOR_LENGTH]
    suffix = f" (as db role {db_role})"
    room = max(ACTOR_LENGTH - len(suffix), 0)
    shown = claimed if len(claimed) <= room else claimed[: max(room - 3, 0)] + "..."
    return (shown + suffix)[:ACTOR_LENGTH]
