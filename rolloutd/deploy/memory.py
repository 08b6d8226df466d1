"""The in-memory twin of a deploy executor: replicas that run whatever set was last deployed.

Tests and property checks drive a rollback's redeploy and verify phases through it without
an engine; ``failing`` makes a replica's deploys fail (as a broken engine host would) until
it is cleared, and ``unhealthy`` makes its verification fail.
"""

from __future__ import annotations

import threading

from rolloutd.core.plan import Replica
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import DeployResult, Verification, verdict


class MemoryExecutor:
    """Deploys into a dict; keeps every call for the assertions."""

    kind = "memory"

    def __init__(self) -> None:
        self.running: dict[str, str] = {}
        self.failing: set[str] = set()
        self.unhealthy: set[str] = set()
        self.calls: list[tuple[str, str, str]] = []  # (deploy|verify, replica, set)
        self._lock = threading.Lock()

    def deploy(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> DeployResult:
        """Run ``artefacts`` on ``replica`` unless the replica is failing."""
        with self._lock:
            self.calls.append(("deploy", replica.name, artefacts.name))
            ok = replica.name not in self.failing
            changed = ok and self.running.get(replica.name) != artefacts.name
            if ok:
                self.running[replica.name] = artefacts.name
        reason = "deployed" if ok else f"{replica.name} refused the deploy"
        return DeployResult.of(
            self.kind, replica, artefacts, ok=ok, reason=reason, duration_s=0.0, changed=changed
        )

    def verify(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> Verification:
        """Healthy unless marked unhealthy; verified when it runs exactly ``artefacts``."""
        with self._lock:
            self.calls.append(("verify", replica.name, artefacts.name))
            healthy = replica.name not in self.unhealthy
            runs = self.running.get(replica.name)
        runs_pinned = runs == artefacts.name
        ok = healthy and runs_pinned
        reason = "verified" if ok else f"{replica.name} runs {runs!r}, healthy={healthy}"
        return verdict(replica, artefacts, 0.0, healthy, runs_pinned, reason)
