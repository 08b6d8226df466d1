"""What the state machine asks the world to do, and what it saw: plain, frozen data.

Every action carries a deterministic key, so the shell can write it to the journal once,
replay it after a crash, and never perform it twice with a different effect. A weight
change is keyed by the desired fact it serves and that fact's generation
(``weight@gen7=0``), so an attempt toward an older generation is known to be stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from rolloutd.core.actors import acting


class Verdict(StrEnum):
    """A gate's judgement. Only PASS may let a step complete."""

    PASS = "pass"
    FAIL = "fail"
    BREACH = "breach"
    INCONCLUSIVE = "inconclusive"
    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class GateResult:
    """The newest evaluation of one gate; ``samples`` is how many observations it rests on
    (None when the gate's kind counts none, or the measurement failed)."""

    verdict: Verdict
    evaluated_at: datetime
    reason: str = ""
    value: float | None = None
    threshold: str | None = None
    samples: int | None = None


CommandKind = Literal["promote", "abort", "pause", "resume"]
Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True)
class Command:
    """An operator's instruction, as written by ``rolloutctl``."""

    id: int
    kind: CommandKind
    actor: str
    reason: str | None = None
    full: bool = False
    db_role: str | None = None
    """The database role that inserted it (Postgres records it; the client cannot choose it)."""

    @property
    def by(self) -> str:
        """Who, as the audit log's texts say it: the claimed name, and the role if it differs."""
        return acting(self.actor, self.db_role)


@dataclass(frozen=True)
class Observed:
    """What the shell saw of the world before this decision: the router's read-back
    (None when it could not be read; ``router_mirror`` None when unknown) and the keys of
    the replica actions (deploy, verify) that were performed."""

    router_weight: int | None = None
    done_actions: frozenset[str] = frozenset()
    router_mirror: bool | None = None


@dataclass(frozen=True)
class Alert:
    """Tell people: ``topic`` names what happened (rollback_started, awaiting_promotion, ...)."""

    key: str
    topic: str
    severity: Severity
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    kind: Literal["alert"] = "alert"

    def payload(self) -> dict[str, Any]:
        """The action's arguments as stored in the journal."""
        return {"topic": self.topic, "severity": self.severity, "text": self.text, **self.data}


@dataclass(frozen=True)
class _OnReplica:
    """An action on one replica with one pinned artefact set."""

    key: str
    replica: str
    artefacts: str

    def payload(self) -> dict[str, Any]:
        """The action's arguments as stored in the journal."""
        return {"replica": self.replica, "artefacts": self.artefacts}


@dataclass(frozen=True)
class Deploy(_OnReplica):
    """Put the pinned artefact set ``artefacts`` on ``replica`` (idempotent by design)."""

    kind: Literal["deploy"] = "deploy"


@dataclass(frozen=True)
class Verify(_OnReplica):
    """Check that ``replica`` is healthy and serves exactly the pinned set ``artefacts``."""

    kind: Literal["verify"] = "verify"


Action = Alert | Deploy | Verify
"""What a decision asks the shell to do besides serving its desired fact (which is a fact,
not an action: the shell converges the router to it)."""


@dataclass(frozen=True)
class Event:
    """A line of the audit log."""

    kind: str
    detail: str
    actor: str = "rolloutd"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommandOutcome:
    """Whether a command was applied, and why not if it was rejected."""

    command_id: int
    applied: bool
    detail: str
