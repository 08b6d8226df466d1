"""A fleet of simulated replicas in one process: named, pooled, started and stopped together.

``Fleet.reference()`` is the reference deployment of the design: three stable replicas on
``max_seq_len`` 32,768 (gpu-a, gpu-b, gpu-c) and one canary on 8,192 (gpu-d), TensorRT-LLM
in Triton. All replicas write to one ledger, and the fleet owns the gateway counters that
the traffic generator fills, so ``fleet.metrics()`` can answer every gate signal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rolloutd.sim.config import REFERENCE_CANARY, REFERENCE_STABLE, EngineConfig
from rolloutd.sim.engine import Replica
from rolloutd.sim.exposition import Flavor
from rolloutd.sim.gateway import AgentMetrics
from rolloutd.sim.ledger import RequestLedger
from rolloutd.sim.profiles import Profile

if TYPE_CHECKING:
    from rolloutd.sim.source import SimulatorMetrics


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica of a fleet: its name, pool, serving stack, quality and engine config."""

    name: str
    pool: str = "stable"
    flavor: Flavor = "triton"
    profile: Profile = "exact"
    config: EngineConfig = field(default=REFERENCE_STABLE)


class Fleet:
    """Replicas served on 127.0.0.1, one thread pool each; use as a context manager."""

    def __init__(
        self,
        specs: Sequence[ReplicaSpec],
        *,
        time_scale: float = 0.001,
        seed: int = 0,
        restart_delay_s: float = 60.0,
        load_delay_s: float = 20.0,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"replica names must be unique, got {names}")
        self.time_scale = time_scale
        self.ledger = RequestLedger()
        self.gateway = AgentMetrics()
        self._replicas = {
            spec.name: Replica(
                spec.name,
                pool=spec.pool,
                flavor=spec.flavor,
                profile=spec.profile,
                config=spec.config,
                seed=seed,
                time_scale=time_scale,
                restart_delay_s=restart_delay_s,
                load_delay_s=load_delay_s,
                ledger=self.ledger,
            )
            for spec in specs
        }

    @classmethod
    def reference(
        cls,
        *,
        flavor: Flavor = "triton",
        canary_profile: Profile = "exact",
        canary_config: EngineConfig = REFERENCE_CANARY,
        time_scale: float = 0.001,
        seed: int = 0,
        restart_delay_s: float = 60.0,
        load_delay_s: float = 20.0,
    ) -> Fleet:
        """The reference deployment: gpu-a..c stable at 32,768, gpu-d canary at 8,192."""
        specs = [ReplicaSpec(name, "stable", flavor) for name in ("gpu-a", "gpu-b", "gpu-c")]
        specs.append(ReplicaSpec("gpu-d", "canary", flavor, canary_profile, canary_config))
        return cls(
            specs,
            time_scale=time_scale,
            seed=seed,
            restart_delay_s=restart_delay_s,
            load_delay_s=load_delay_s,
        )

    def start(self, ports: Mapping[str, int] | None = None) -> Fleet:
        """Start serving every replica, on its port in ``ports`` (by name) or a free one;
        returns self.

        :raises OSError: a port cannot be bound; the replicas already started are stopped.
        """
        try:
            for name, replica in self._replicas.items():
                replica.start((ports or {}).get(name, 0))
        except OSError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every replica and the gateway exporter."""
        for replica in self._replicas.values():
            replica.stop()
        self.gateway.close()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def replica(self, name: str) -> Replica:
        """The replica called ``name``.

        :raises KeyError: no such replica; the message lists the ones there are.
        """
        try:
            return self._replicas[name]
        except KeyError:
            raise KeyError(
                f"no replica {name!r}; the fleet has {', '.join(self._replicas)}"
            ) from None

    def replicas(self, pool: str | None = None) -> list[Replica]:
        """All replicas, or those of one pool, in the order they were given."""
        return [r for r in self._replicas.values() if pool is None or r.pool == pool]

    def urls(self, pool: str | None = None) -> dict[str, str]:
        """``{name: base URL}`` of the started replicas, all or of one pool."""
        return {replica.name: replica.url for replica in self.replicas(pool)}

    def metrics(self) -> SimulatorMetrics:
        """A metrics source over this fleet's ledger, replicas and gateway counters."""
        from rolloutd.sim.source import SimulatorMetrics

        return SimulatorMetrics(self.replicas(), self.gateway)
