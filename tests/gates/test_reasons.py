"""Gate reasons read as English: a count comes with its noun, singular or plural, and an event
signal is named by what it counts ("1 OOM event"), not by its metric name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from rolloutd.core.actions import Verdict
from rolloutd.core.counts import counted, events_counted
from rolloutd.core.plan import Plan
from rolloutd.gates.base import Evaluation, Judging
from rolloutd.gates.evaluate import evaluate_gate
from rolloutd.metrics.sources import MemoryMetrics
from rolloutd.planfile import parse_plan
from tests.plans import memory_plan

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GATES: dict[str, Any] = {
    "oom": {"kind": "events", "signal": "oom_events", "window": "5m"},
    "restarts": {"kind": "events", "signal": "engine_restarts", "max_events": 1},
    "errors": {"kind": "threshold", "signal": "error_rate", "max": 0.01, "min_samples": 100},
    "lat": {"kind": "latency", "signal": "e2e_latency", "target_seconds": 12.0, "min_samples": 50},
    "esc": {"kind": "compare", "signal": "escalations", "min_events": 10},
}


def _plan() -> Plan:
    data = memory_plan(
        triggers=("oom", "restarts"),
        steps=[{"kind": "canary", "weight": 25, "bake": "1h", "gates": ["errors", "lat", "esc"]}],
        gates=GATES,
    )
    return parse_plan(yaml.safe_dump(data), "plan.yaml").plan


def _reason(gate: str, metrics: MemoryMetrics) -> Evaluation:
    plan = _plan()
    judging = Judging(gate, "step", metrics, NOW, plan, NOW - timedelta(hours=1), weight=25)
    return evaluate_gate(plan.gates[gate], judging)


@pytest.mark.parametrize(
    ("count", "reason"),
    [
        (1, "1 OOM event on the canary in the last 5m"),
        (2, "2 OOM events on the canary in the last 5m"),
    ],
)
def test_an_oom_reason_counts_oom_events_in_words(count: int, reason: str) -> None:
    """The OOM trigger's breach reads "1 OOM event", "2 OOM events", not "1 oom_events"."""
    metrics = MemoryMetrics()
    metrics.set("oom_events", "canary", count)
    breach = _reason("oom", metrics)
    assert (breach.verdict, breach.reason, breach.threshold) == (
        Verdict.BREACH,
        reason,
        "<= 0 OOM events",
    )


def test_an_event_signal_without_a_known_noun_is_named_after_itself() -> None:
    """``engine_restarts`` counts engine restarts: "2 engine restarts", "<= 1 engine restart"."""
    metrics = MemoryMetrics()
    metrics.set("engine_restarts", "canary", 2)
    breach = _reason("restarts", metrics)
    assert breach.reason.startswith("2 engine restarts on the canary")
    assert breach.threshold == "<= 1 engine restart"


# 0 samples an hour into the step is no traffic, not too few samples (see test_exposure.py).
@pytest.mark.parametrize(("samples", "words"), [(1, "1 sample"), (7, "7 samples")])
def test_a_gate_short_of_samples_counts_them_in_words(samples: int, words: str) -> None:
    """A threshold and a latency gate short of samples say "1 sample", "7 samples"."""
    metrics = MemoryMetrics()
    metrics.set("error_rate", "canary", 0.001, samples=samples)
    metrics.set("e2e_latency", "canary", 1.0, samples, {"buckets": {}})
    metrics.set("e2e_latency", "stable", 1.0, 1000, {"buckets": {}})
    assert _reason("errors", metrics).reason == f"{words} of the 100 needed"
    assert _reason("lat", metrics).reason == f"{words} of the 50 needed"


def test_a_comparison_short_of_events_counts_them_in_words() -> None:
    """One escalation of the ten a comparison needs reads "1 event of the 10 needed"."""
    metrics = MemoryMetrics()
    metrics.set("escalations", "canary", 1, samples=500)
    metrics.set("escalations", "stable", 0, samples=1500)
    pending = _reason("esc", metrics)
    assert pending.verdict is Verdict.PENDING
    assert pending.reason.startswith("1 event of the 10 needed")


@pytest.mark.parametrize(
    ("count", "one", "many", "words"),
    [
        (1, "sample", None, "1 sample"),
        (2, "sample", None, "2 samples"),
        (0, "event", None, "0 events"),
        (1.5, "event", None, "1.5 events"),
        (3, "escalation to a human", "escalations to a human", "3 escalations to a human"),
    ],
)
def test_a_count_takes_the_singular_for_one_and_the_plural_otherwise(
    count: float, one: str, many: str | None, words: str
) -> None:
    """``counted`` says the number, then the noun as the number wants it."""
    assert counted(count, one, many) == words


def test_every_event_signal_of_the_gate_templates_has_a_noun() -> None:
    """The templates' counting signals read as what they count, each one in both numbers."""
    assert [events_counted(s, 1) for s in ("oom_events", "queue_timeouts", "errors")] == [
        "1 OOM event",
        "1 queue timeout",
        "1 failed request",
    ]
    assert events_counted("schema_violations", 2) == "2 schema violations"
