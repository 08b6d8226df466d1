"""Choosing the executor a plan names, and the one for plans that deploy nothing.

``build_executor(plan)`` is what the reconciler and the drill call; the kinds themselves
live in ``command``, ``triton`` and ``systemd``. See ``rolloutd.deploy.base`` for the contract.
"""

from __future__ import annotations

from rolloutd.core.plan import (
    CommandExecutor,
    Plan,
    Replica,
    Role,
    SystemdExecutor,
    TritonExecutor,
)
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import DeployResult, Executor, Verification, verdict
from rolloutd.errors import BadInput

__all__ = ["DeployResult", "Executor", "NullDeployer", "Verification", "build_executor"]


class NullDeployer:
    """The ``none`` executor: operators deploy by hand, so a rollback moves traffic only.

    ``deploy`` does nothing and says so; ``verify`` cannot compare digests (``digest_ok``
    None) and does not poll health, because it does not know which engine answers.
    """

    kind = "none"

    def deploy(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> DeployResult:
        reason = "the plan's executor is 'none': nothing deployed"
        return DeployResult.of(
            self.kind, replica, artefacts, ok=True, reason=reason, duration_s=0.0, changed=False
        )

    def verify(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> Verification:
        reason = "the plan's executor is 'none': nothing verified"
        return verdict(replica, artefacts, 0.0, True, None, reason)


def build_executor(plan: Plan, source: str = "plan") -> Executor:
    """The executor ``plan.executor`` names, ready to deploy to the plan's replicas.

    :raises BadInput: the executor section names replicas the plan does not have.
    """
    spec = plan.executor
    if isinstance(spec, CommandExecutor):
        from rolloutd.deploy.command import CommandDeployer

        return CommandDeployer(spec)
    known = {r.name for pool in (plan.pools.stable, plan.pools.canary) for r in pool.replicas}
    if isinstance(spec, SystemdExecutor):
        from rolloutd.deploy.systemd import SystemdDeployer

        _known_urls(spec.urls, known, source)
        return SystemdDeployer(spec)
    if isinstance(spec, TritonExecutor):
        from rolloutd.deploy.triton import TritonDeployer

        for name in spec.urls:
            if name not in known:
                raise BadInput.one(
                    source, f"executor.urls.{name}", f"no replica named {name!r} in the pools"
                )
        roles: dict[str, Role] = {plan.artefacts.stable: "stable", plan.artefacts.canary: "canary"}
        return TritonDeployer(spec, roles)
    return NullDeployer()


def _known_urls(urls: dict[str, str], known: set[str], source: str) -> None:
    for name in urls:
        if name not in known:
            raise BadInput.one(
                source, f"executor.urls.{name}", f"no replica named {name!r} in the pools"
            )
