"""Faults a test or the demo injects into a running replica, and how they are validated.

The same names are used from Python (``replica.set_faults(latency_factor=3)``) and over the
admin endpoint (``POST /admin/faults {"latency_factor": 3}``). Values are checked as strictly
as a plan file: an unknown fault or an out-of-range value is refused with a message naming
the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class FaultError(ValueError):
    """A fault update names an unknown fault or carries a bad value."""


@dataclass(frozen=True)
class Faults:
    """The faults in force on one replica. The defaults are a healthy engine."""

    latency_factor: float = 1.0
    """Multiplies simulated prefill and decode time (a slower build, a throttled GPU)."""
    timeout_rate: float = 0.0
    """Share of requests that wait out the queue timeout and are rejected, on top of real
    queueing."""
    schema_violation_rate: float = 0.0
    """Share of tool calls whose arguments violate the tool's schema."""
    exactness_drop: float = 0.0
    """Share of tool calls with one wrong argument value."""
    escalation_rate: float = 0.0
    """Share of answers where the model hands the user over to a human instead of acting."""
    unfaithful_rate: float = 0.0
    """Share of reference-case answers (RAG) not supported by their context."""
    prompt_drift: float = 1.0
    """Multiplies prompt lengths as the engine counts them (a template or client change)."""
    metrics_silent: float = 0.0
    """1: ``/metrics`` answers 503 while the engine keeps serving (a hung or firewalled
    exporter): its last counts freeze in Prometheus."""

    def updated(self, changes: Mapping[str, Any]) -> Faults:
        """These faults with ``changes`` applied.

        :raises FaultError: an unknown name or an invalid value; the message names it.
        """
        known = {f.name for f in dataclasses.fields(self)}
        values: dict[str, float] = {}
        for name, value in changes.items():
            if name not in known:
                raise FaultError(f"unknown fault {name!r}; known: {', '.join(sorted(known))}")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FaultError(f"{name}: expected a number, got {value!r}")
            values[name] = float(value)
            _check(name, values[name])
        return dataclasses.replace(self, **values)

    def as_dict(self) -> dict[str, float]:
        """The faults as JSON-ready data."""
        return dataclasses.asdict(self)


def _check(name: str, value: float) -> None:
    if name in ("latency_factor", "prompt_drift"):
        if not 0.0 < value <= 100.0:
            raise FaultError(f"{name}: expected a factor in (0, 100], got {value:g}")
    elif not 0.0 <= value <= 1.0:
        raise FaultError(f"{name}: expected a share between 0 and 1, got {value:g}")
