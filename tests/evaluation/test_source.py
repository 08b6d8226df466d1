"""Tests of the suite-fed metrics source: suite calls join the live schema counts."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rolloutd.evaluation.source import SuiteFedSource
from rolloutd.gates.base import Measurement, MeasurementError, Pool
from tests.evaluation.test_gate import NOW

WINDOW = timedelta(minutes=5)
POOLS: tuple[Pool, ...] = ("canary", "stable")


class Live:
    """A live source with fixed answers; None means the query fails."""

    def __init__(self, answers: dict[str, Measurement | None]) -> None:
        self.answers = answers

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The fixed answer for ``signal``."""
        answer = self.answers.get(signal)
        if answer is None:
            raise MeasurementError(f"no data for {signal}")
        return answer


def suite(violations: int, calls: int) -> SuiteFedSource:
    """A live source with 2 violations in 1,000 calls, fed by a suite run."""
    live = Live(
        {
            "schema_violation_rate": Measurement(0.002, 1000, "q"),
            "schema_violations": Measurement(2, 1000, "q"),
            "e2e_latency": Measurement(3.0, 10, "q"),
        }
    )
    return SuiteFedSource(live, dict.fromkeys(POOLS, (violations, calls, 7)))


def test_the_suite_run_is_added_to_the_live_rate_and_count() -> None:
    """6 violations in 300 suite calls plus 2 in 1,000 live ones: 8 in 1,300."""
    source = suite(6, 300)
    rate = source.measure("schema_violation_rate", "canary", WINDOW, NOW)
    assert rate.value == pytest.approx(8 / 1300) and rate.samples == 1300
    assert rate.raw["suite"] == {"violations": 6, "calls": 300, "run_id": 7}
    count = source.measure("schema_violations", "canary", WINDOW, NOW)
    assert (count.value, count.samples) == (8, 1300)


def test_other_signals_pass_through() -> None:
    """Latency is not touched."""
    assert suite(6, 300).measure("e2e_latency", "canary", WINDOW, NOW).value == 3.0


def test_without_live_traffic_the_suite_alone_answers() -> None:
    """A shadow step with no mirrored traffic still gets a schema-violation rate."""
    source = SuiteFedSource(Live({}), dict.fromkeys(POOLS, (3, 300, 1)))
    rate = source.measure("schema_violation_rate", "canary", WINDOW, NOW)
    assert (rate.value, rate.samples) == (0.01, 300)
    with pytest.raises(MeasurementError):
        SuiteFedSource(Live({}), dict.fromkeys(POOLS, (0, 0, None))).measure(
            "schema_violation_rate", "canary", WINDOW, NOW
        )


def test_a_pool_without_a_suite_run_gets_the_live_measurement_alone() -> None:
    """Counts for the canary only: stable's schema signals are the live ones, untouched."""
    source = SuiteFedSource(suite(6, 300).inner, {"canary": (6, 300, 7)})
    rate = source.measure("schema_violation_rate", "stable", WINDOW, NOW)
    assert (rate.value, rate.samples) == (0.002, 1000)
