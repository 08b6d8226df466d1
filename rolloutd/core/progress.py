"""The facts a rollout's progress is made of, and the state users see, derived from them.

Storage keeps facts (which step, when it was entered, when its weight was verified,
how much bake time has accrued, whether an operator paused it, why a rollback began),
never a phase to be trusted: :func:`derive_state` recomputes the phase on every read.

The facts include the *desired* world: the canary weight and mirror the router must serve
(with a generation that grows at every change) and, during a rollback, which phase it is in
and which replicas still owe a redeploy or a verification. They are written in the same
transaction as the decision that changed them; actions are only attempts toward them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Self


class State(StrEnum):
    """The state of a rollout as reported to users."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    AWAITING_PROMOTION = "awaiting_promotion"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    COMPLETED = "completed"
    ABORTED = "aborted"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """Whether nothing can happen to the rollout any more."""
        return self in TERMINAL


TERMINAL = frozenset({State.ROLLED_BACK, State.COMPLETED, State.ABORTED, State.FAILED})
Ending = Literal["rolled_back", "completed", "aborted", "failed"]
PauseCause = Literal["operator", "inconclusive"]
RollbackPhase = Literal["weight", "redeploy", "verify"]
RollbackKind = Literal["gate", "trigger", "abort", "deadline", "no_data"]
"""What started a rollback: a step gate's breach, a rollback trigger, an operator's abort, the
progress deadline, or a gate without data (or samples) under ``on_no_data``."""
RollbackOutcome = Literal["verified", "traffic_only"]
"""How a rollback ended: every canary replica redeployed with the stable set and verified, or
traffic moved back only, the replicas untouched (the plan has no executor)."""
TRAFFIC_ONLY = "traffic only: no executor"
"""What a traffic-only rollback adds to its state wherever people read it."""


@dataclass(frozen=True, slots=True)
class Desired:
    """What the router must serve. ``generation`` grows with every change, so an attempt
    toward an older generation is recognisably stale and is never performed."""

    weight: int
    mirror: bool = False
    generation: int = 1

    @property
    def key(self) -> str:
        """The key of the attempt toward this fact, e.g. ``weight@gen7=0``."""
        return f"weight@gen{self.generation}={self.weight}" + ("+mirror" if self.mirror else "")

    def changed_to(self, weight: int, mirror: bool) -> Desired:
        """The next generation, serving ``weight`` (and mirroring or not)."""
        return Desired(weight, mirror, self.generation + 1)

    def served_by(self, weight: int | None, mirror: bool | None) -> bool:
        """Whether a router that reads ``weight`` (and ``mirror``, if known) serves this."""
        return weight == self.weight and (mirror is None or mirror == self.mirror)


@dataclass(frozen=True, slots=True)
class RollbackFacts:
    """Why and when a rollback began."""

    cause: str
    started_at: datetime
    gate: str | None = None
    phase: RollbackPhase = "weight"
    owed: tuple[str, ...] = ()
    """Replicas that still owe the current phase's redeploy or verification."""
    kind: RollbackKind | None = None
    """None only in progress stored before rollbacks were classified."""
    outcome: RollbackOutcome | None = None
    """Set when the rollback ends; None before, and in progress stored before outcomes were."""
    no_executor_reason: str | None = None
    """With a ``traffic_only`` outcome: why the plan has no executor, as the plan says it."""


@dataclass(frozen=True, slots=True)
class Progress:
    """Everything the state machine needs to remember between ticks."""

    started_at: datetime | None = None
    step_index: int = 0
    step_entered_at: datetime | None = None
    step_verified_at: datetime | None = None
    baked_seconds: float = 0.0
    bake_mark: datetime | None = None
    promoted: bool = False
    promoted_after_seconds: float = 0.0
    paused: PauseCause | None = None
    inconclusive_streaks: dict[str, int] = field(default_factory=dict)
    no_data_since: dict[str, datetime] = field(default_factory=dict)
    """Per gate, when its current inconclusive streak began (its first inconclusive evaluation)."""
    last_seen: dict[str, datetime] = field(default_factory=dict)
    extended: bool = False
    """The step's bake was extended for want of samples (``min_samples``)."""
    short_since: datetime | None = None
    """When the step's extension ran out with a gate still short of samples."""
    rollback: RollbackFacts | None = None
    desired: Desired | None = None
    ended: Ending | None = None
    ended_at: datetime | None = None

    def baked(self, now: datetime) -> timedelta:
        """Bake time accrued in the current step, paused time excluded."""
        running = (now - self.bake_mark).total_seconds() if self.bake_mark else 0.0
        return timedelta(seconds=self.baked_seconds + max(running, 0.0))

    def stop_clock(self, now: datetime) -> Self:
        """Bank the running bake time and stop counting (pause)."""
        return replace(self, baked_seconds=self.baked(now).total_seconds(), bake_mark=None)

    def for_storage(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_storage` reads it back."""
        return {
            "started_at": _iso(self.started_at),
            "step_index": self.step_index,
            "step_entered_at": _iso(self.step_entered_at),
            "step_verified_at": _iso(self.step_verified_at),
            "baked_seconds": self.baked_seconds,
            "bake_mark": _iso(self.bake_mark),
            "promoted": self.promoted,
            "promoted_after_seconds": self.promoted_after_seconds,
            "paused": self.paused,
            "inconclusive_streaks": dict(self.inconclusive_streaks),
            "no_data_since": {k: _iso(v) for k, v in self.no_data_since.items()},
            "last_seen": {k: _iso(v) for k, v in self.last_seen.items()},
            "extended": self.extended,
            "short_since": _iso(self.short_since),
            "rollback": None
            if self.rollback is None
            else {
                "cause": self.rollback.cause,
                "started_at": _iso(self.rollback.started_at),
                "gate": self.rollback.gate,
                "phase": self.rollback.phase,
                "owed": list(self.rollback.owed),
                "kind": self.rollback.kind,
                "outcome": self.rollback.outcome,
                "no_executor_reason": self.rollback.no_executor_reason,
            },
            "desired": None
            if self.desired is None
            else {
                "weight": self.desired.weight,
                "mirror": self.desired.mirror,
                "generation": self.desired.generation,
            },
            "ended": self.ended,
            "ended_at": _iso(self.ended_at),
        }

    @classmethod
    def from_storage(cls, data: dict[str, Any]) -> Self:
        """Rebuild progress from :meth:`for_storage` output."""
        rollback = data.get("rollback")
        desired = data.get("desired")
        return cls(
            started_at=_dt(data.get("started_at")),
            step_index=int(data.get("step_index", 0)),
            step_entered_at=_dt(data.get("step_entered_at")),
            step_verified_at=_dt(data.get("step_verified_at")),
            baked_seconds=float(data.get("baked_seconds", 0.0)),
            bake_mark=_dt(data.get("bake_mark")),
            promoted=bool(data.get("promoted", False)),
            promoted_after_seconds=float(data.get("promoted_after_seconds", 0.0)),
            paused=data.get("paused"),
            inconclusive_streaks=dict(data.get("inconclusive_streaks") or {}),
            no_data_since={k: _req_dt(v) for k, v in (data.get("no_data_since") or {}).items()},
            last_seen={k: _req_dt(v) for k, v in (data.get("last_seen") or {}).items()},
            extended=bool(data.get("extended", False)),
            short_since=_dt(data.get("short_since")),
            rollback=None
            if not rollback
            else RollbackFacts(
                cause=rollback["cause"],
                started_at=_req_dt(rollback["started_at"]),
                gate=rollback.get("gate"),
                # Progress written before the rollback's phases were facts starts at the
                # weight phase; the machine moves it on from what the world shows.
                phase=rollback.get("phase", "weight"),
                owed=tuple(rollback.get("owed") or ()),
                kind=rollback.get("kind"),
                outcome=rollback.get("outcome"),
                no_executor_reason=rollback.get("no_executor_reason"),
            ),
            desired=None
            if not desired
            else Desired(
                weight=int(desired["weight"]),
                mirror=bool(desired.get("mirror", False)),
                generation=int(desired.get("generation", 1)),
            ),
            ended=data.get("ended"),
            ended_at=_dt(data.get("ended_at")),
        )


def derive_state(progress: Progress, *, awaiting_promotion: bool) -> State:
    """The user-facing state, recomputed from facts; ``awaiting_promotion`` comes from the plan."""
    if progress.ended is not None:
        return State(progress.ended)
    if progress.rollback is not None:
        return State.ROLLING_BACK
    if progress.started_at is None:
        return State.PENDING
    if progress.paused is not None:
        return State.PAUSED
    if awaiting_promotion:
        return State.AWAITING_PROMOTION
    return State.RUNNING


def rollback_outcome(progress: Progress) -> RollbackOutcome | None:
    """How the rollout's rollback ended, once it has ended rolled back (else None)."""
    if progress.ended != State.ROLLED_BACK.value or progress.rollback is None:
        return None
    return progress.rollback.outcome


def step_number(index: int, count: int) -> str:
    """A step as people count it, from 1: ``step 2 of 6`` for the step at ``index`` 1 of six.

    Storage and the machine index steps from 0 (``step_index``, a plan's ``steps[1]``); every
    view numbers them from 1, and JSON says ``"step": 2, "steps": 6``."""
    return f"step {index + 1} of {count}"


def shown_state(state: State, outcome: RollbackOutcome | None) -> str:
    """The state as people read it: ``rolled_back (traffic only: no executor)`` for a rollback
    that redeployed nothing, the state's own name otherwise."""
    if state is State.ROLLED_BACK and outcome == "traffic_only":
        return f"{state.value} ({TRAFFIC_ONLY})"
    return state.value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _dt(value: str | None) -> datetime | None:
    return None if value is None else _req_dt(value)


def _req_dt(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
