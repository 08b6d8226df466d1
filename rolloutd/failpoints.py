"""Named points where a test can freeze or fail a real daemon process, off by default.

A split-brain test needs the leader frozen at one exact instant -- after it committed a weight
and passed its last lease check, before the router write -- which no signal sent from outside
can hit reliably. ``ROLLOUTD_FAILPOINTS`` names the points to arm, ``name=action`` separated by
commas or spaces:

- ``stop``: the process sends itself SIGSTOP there (a test resumes it with SIGCONT);
- ``stop-once``: the same, the first time only;
- ``raise``: the point raises :class:`FailpointError`.

The daemon arms them at start (:func:`arm`, which refuses a typo) and logs what it armed, so a
failpoint left set in production is visible; unarmed, :func:`hit` costs one truth test.
"""

from __future__ import annotations

import os
import signal
import threading

from rolloutd.errors import BadInput

ENV = "ROLLOUTD_FAILPOINTS"
ACTIONS = ("stop", "stop-once", "raise")

# Every point the code defines: an unknown name in the variable is a typo, and refused.
POINTS = {
    "before_router_write": "after a weight's lease check, before the router write",
    "before_journal": "in the file driver, after a weight landed, before its journal line",
}


class FailpointError(RuntimeError):
    """Raised at a point armed with ``raise``."""


def parse(text: str) -> dict[str, str]:
    """``name=action`` pairs from the variable's text.

    :raises BadInput: for an unknown point or action, naming the variable.
    """
    armed: dict[str, str] = {}
    for item in text.replace(",", " ").split():
        name, _, action = item.partition("=")
        if name not in POINTS:
            known = ", ".join(sorted(POINTS))
            raise BadInput.one(ENV, name, f"no such failpoint (known: {known})")
        if action not in ACTIONS:
            raise BadInput.one(ENV, name, f"the action must be one of {', '.join(ACTIONS)}")
        armed[name] = action
    return armed


_armed: dict[str, str] = {}
_lock = threading.Lock()


def arm() -> dict[str, str]:
    """Arm the points the variable names; returns them.

    :raises BadInput: for an unknown point or action.
    """
    points = parse(os.environ.get(ENV, ""))
    with _lock:
        _armed.clear()
        _armed.update(points)
    return dict(points)


def hit(name: str) -> None:
    """Pass the point ``name``: nothing, unless the variable armed it."""
    if not _armed:
        return
    assert name in POINTS, name
    with _lock:
        action = _armed.get(name)
        if action == "stop-once":
            del _armed[name]
    if action in ("stop", "stop-once"):
        # Directed at this thread, which stops before it returns from the call; a SIGSTOP
        # sent to the process is taken by another thread, and this one runs on meanwhile.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    elif action == "raise":
        raise FailpointError(f"failpoint {name}")
