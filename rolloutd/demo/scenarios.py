"""The demo's scenarios: which fault hits the canary, when, and how the rollout must end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rolloutd.sim.fleet import Fleet

CANARY = "gpu-d"


@dataclass(frozen=True)
class Scenario:
    """A fault injected into the canary once the rollout reaches the step at index
    ``at_step`` of the plan (0: its first)."""

    name: str
    description: str
    expected: str
    inject: Callable[[Fleet], None] | None = None
    at_step: int = 2

    def apply(self, fleet: Fleet) -> None:
        """Inject this scenario's fault (nothing for the happy path)."""
        if self.inject is not None:
            self.inject(fleet)


def _faults(**changes: float) -> Callable[[Fleet], None]:
    def inject(fleet: Fleet) -> None:
        fleet.replica(CANARY).set_faults(**changes)

    return inject


def _oom(fleet: Fleet) -> None:
    fleet.replica(CANARY).inject_oom("CUDA out of memory (injected by the demo)")


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("happy", "no fault: the rollout runs to 100%", "completed"),
        Scenario(
            "latency",
            "the canary serves three times slower at 25%",
            "rolled_back",
            _faults(latency_factor=3.0),
        ),
        Scenario(
            "timeouts",
            "8% of the canary's requests time out in the queue at 25%",
            "rolled_back",
            _faults(timeout_rate=0.08),
        ),
        Scenario("oom", "the canary replica runs out of GPU memory at 25%", "rolled_back", _oom),
        Scenario(
            "schema",
            "3% of the canary's tool calls violate the tool schema at 25%",
            "rolled_back",
            _faults(schema_violation_rate=0.03),
        ),
        Scenario(
            "escalation",
            "sessions on the canary escalate to a human far more often at 25%",
            "rolled_back",
            _faults(escalation_rate=0.5),
        ),
    )
}
