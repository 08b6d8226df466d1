"""Before a rollout starts: can its gates be judged at all, on the metrics that exist?

A plan written against a template may meet an engine that does not export what the template
reads (an older Triton without the ``reason`` label, a vLLM V0 without the queue-time
histogram, a deployment without the agent gateway). Every such gate would stay inconclusive
for the whole rollout. The preflight asks the plan's metrics source for every gate's signal
on both pools, now, and sorts the answers: *ok* (a finite number), *no data yet* (the series
exist but there is no traffic in the window, or no fresh sample) and *absent* (a series the
signal needs does not exist: it will never be judged until the engine or the template
changes). A gate of the first step (or a rollback trigger) with an absent signal blocks a
start.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from rolloutd.core.plan import CapacityGate, Plan, SuiteGate
from rolloutd.gates.base import MeasurementError, MetricsSource, Pool
from rolloutd.metrics.templates import CAPACITY_SIGNALS

Found = Literal["ok", "no data yet", "absent"]
POOLS: tuple[Pool, ...] = ("canary", "stable")


@dataclass(frozen=True)
class Check:
    """One signal of one gate on one pool, as the metrics answered it now."""

    gate: str
    signal: str
    pool: Pool
    found: Found
    value: float | None
    samples: int | None
    query: str | None
    why: str
    first_step: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for ``--output json``."""
        return asdict(self)


def _signals(plan: Plan) -> Iterator[tuple[str, str]]:
    """(gate, signal) for every gate the metrics source judges (suites judge themselves)."""
    for name, gate in plan.gates.items():
        if isinstance(gate, SuiteGate):
            continue
        if isinstance(gate, CapacityGate):
            for signal in CAPACITY_SIGNALS:
                yield name, signal
            continue
        yield name, gate.signal


def first_step_gates(plan: Plan) -> frozenset[str]:
    """The gates judged from the first tick on: the first step's and the rollback triggers."""
    return frozenset((*plan.gates_of(0), *plan.rollback.triggers))


def check_plan(plan: Plan, source: MetricsSource, now: datetime) -> list[Check]:
    """Ask ``source`` for every gate's signal on both pools over the gate's window."""
    first = first_step_gates(plan)
    checks = []
    for gate, signal in _signals(plan):
        window = plan.gates[gate].window
        for pool in POOLS:
            try:
                measured = source.measure(signal, pool, window, now)
            except MeasurementError as exc:
                found: Found = "absent" if exc.reason.startswith("no series for") else "no data yet"
                checks.append(
                    Check(
                        gate, signal, pool, found, None, None, exc.query, exc.reason, gate in first
                    )
                )
                continue
            checks.append(
                Check(
                    gate,
                    signal,
                    pool,
                    "ok",
                    measured.value,
                    measured.samples,
                    measured.query,
                    "",
                    gate in first,
                )
            )
    return checks


def blocking(checks: list[Check]) -> list[Check]:
    """The checks that make a start pointless: a first-step gate whose signal is absent."""
    return [c for c in checks if c.first_step and c.found == "absent"]
