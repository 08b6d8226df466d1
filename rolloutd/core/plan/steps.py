"""Steps: shadow, canary, pause, full and steady."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field

from rolloutd.core.plan.base import Duration, Name, _Spec


class _Step(_Spec):
    """Fields every step kind shares."""

    name: str | None = None
    gates: list[Name] = Field(default_factory=list)
    min_samples: dict[Name, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Per gate of the step, the samples its newest evaluation must rest on for the step to
    complete; short of them when the bake ends, the bake is extended (``max_extension``)."""
    max_extension: Duration | None = None
    """How much longer than its bake the step may wait for ``min_samples``; default: the
    bake's own length. Then the short gate's ``on_no_data`` applies."""

    def hold_for(self) -> timedelta:
        """How long the step must run (paused time excluded) before it may complete."""
        return timedelta(0)

    def extension(self) -> timedelta:
        """How long past its bake the step may wait for its gates' ``min_samples``."""
        return self.hold_for() if self.max_extension is None else self.max_extension

    def awaits_promotion(self) -> bool:
        """Whether the step ends only when an operator promotes."""
        return False

    def title(self) -> str:
        """The step's name as shown to operators."""
        return self.name or self.default_title()

    def default_title(self) -> str:
        """A name derived from the step's kind."""
        raise NotImplementedError


class _HeldStep(_Step):
    """A step that runs for ``duration`` at a weight its kind fixes."""

    duration: Duration = timedelta(0)

    def hold_for(self) -> timedelta:
        return self.duration


class ShadowStep(_HeldStep):
    """Mirrored traffic: the canary sees copies of requests, users see only stable."""

    kind: Literal["shadow"]
    weight: Literal[0] = 0
    mirror: bool = True
    """False: no traffic is mirrored (HAProxy cannot); the gates exercise the canary directly."""

    def default_title(self) -> str:
        return "shadow"


class CanaryStep(_Step):
    """A share of sessions (1-99%) on the canary for a bake period."""

    kind: Literal["canary"]
    weight: int = Field(ge=1, le=99)
    bake: Duration

    def hold_for(self) -> timedelta:
        return self.bake

    def default_title(self) -> str:
        return f"canary {self.weight}%"


class PauseStep(_Step):
    """Holds the current weight until an operator promotes, or ``duration`` passes."""

    kind: Literal["pause"]
    duration: Duration | None = None

    def hold_for(self) -> timedelta:
        return self.duration or timedelta(0)

    def awaits_promotion(self) -> bool:
        return self.duration is None

    def default_title(self) -> str:
        return "awaiting promotion" if self.awaits_promotion() else "pause"


class FullStep(_HeldStep):
    """All new sessions on the canary build."""

    kind: Literal["full"]
    weight: Literal[100] = 100

    def default_title(self) -> str:
        return "full 100%"


class SteadyStep(_HeldStep):
    """The post-promotion watch: capacity and health at 100% for ``duration``."""

    kind: Literal["steady"]
    weight: Literal[100] = 100
    duration: Duration = timedelta(hours=24)

    def default_title(self) -> str:
        return "steady"


Step = Annotated[
    ShadowStep | CanaryStep | PauseStep | FullStep | SteadyStep, Field(discriminator="kind")
]
