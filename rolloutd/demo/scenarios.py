"""The demo's scenarios: which fault hits the canary, when, and how the rollout must end.

A fault hits the deployment's canary replica once the rollout's weight reaches 25%. Each
scenario names the deployments whose plan has a gate that sees its fault."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rolloutd.sim.fleet import Fleet

ATLAS = frozenset({"atlas-70b"})
BOTH = frozenset({"atlas-70b", "support-70b"})


@dataclass(frozen=True)
class Scenario:
    """A fault injected into the canary replica once the rollout's weight reaches
    ``at_weight``, on the deployments in ``deployments``."""

    name: str
    description: str
    expected: str
    inject: Callable[[Fleet, str], None] | None = None
    deployments: frozenset[str] = BOTH
    at_weight: int = 25

    def apply(self, fleet: Fleet, canary: str) -> None:
        """Inject this scenario's fault into replica ``canary`` (nothing for the happy path)."""
        if self.inject is not None:
            self.inject(fleet, canary)


def _faults(**changes: float) -> Callable[[Fleet, str], None]:
    def inject(fleet: Fleet, canary: str) -> None:
        fleet.replica(canary).set_faults(**changes)

    return inject


def _oom(fleet: Fleet, canary: str) -> None:
    fleet.replica(canary).inject_oom("CUDA out of memory (injected by the demo)")


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
            ATLAS,
        ),
        Scenario("oom", "the canary replica runs out of GPU memory at 25%", "rolled_back", _oom),
        Scenario(
            "schema",
            "3% of the canary's tool calls violate the tool schema at 25%",
            "rolled_back",
            _faults(schema_violation_rate=0.03),
            ATLAS,
        ),
        Scenario(
            "escalation",
            "sessions on the canary escalate to a human far more often at 25%",
            "rolled_back",
            _faults(escalation_rate=0.5),
            ATLAS,
        ),
        Scenario(
            "unfaithful",
            "half of the canary's answers leave the retrieved context at 25%",
            "rolled_back",
            _faults(unfaithful_rate=0.5),
            frozenset({"support-70b"}),
        ),
    )
}
