"""The human rendering of a rollout's load: one line, whatever the evidence holds."""

from __future__ import annotations

from rolloutd.cli.render import load_line, resolution_line

LOAD = {
    "canary": {"requests_per_s": 0.42, "inflight": 3.4},
    "stable": {"requests_per_s": 2.6, "inflight": 21.0},
    "ratio": 0.1615,
    "basis": "requests",
    "unknown": None,
    "planned_ratio": 0.158,
    "gate": "e2e_latency_p95",
    "evaluated_at": "2026-03-02T09:00:00+00:00",
}


def test_the_line_shows_both_pools_the_ratio_and_the_plans_expectation() -> None:
    """Requests per second per replica, the measured ratio and the planned one."""
    line = load_line(LOAD)
    assert line.startswith("load per replica: canary 0.42, stable 2.6 req/s; ratio 0.16")
    assert "(planned 0.16)" in line and "e2e_latency_p95, 2026-03-02 09:00:00" in line


def test_in_flight_figures_are_shown_when_they_are_the_basis() -> None:
    """Without a request rate the ratio compares requests in flight, and says so."""
    line = load_line({**LOAD, "basis": "inflight"})
    assert "canary 3.4, stable 21 in flight" in line


def test_an_unknown_load_says_why_and_its_brackets_stay_text() -> None:
    """The reason may quote PromQL; rich must not read its brackets as markup."""
    why = "no data for load_requests_per_replica[bold] on stable"
    line = load_line({**LOAD, "ratio": None, "basis": None, "unknown": why})
    assert "unknown: no data for load_requests_per_replica\\[bold] on stable" in line


def test_a_latency_gates_resolution_names_the_edges_around_its_target() -> None:
    """vLLM's edges 10 and 15 s around a 14 s target: p95s are told apart in 5 s steps."""
    line = resolution_line(
        "e2e_latency_p95",
        {"target_seconds": 14.0, "lower_edge": 10.0, "upper_edge": 15.0, "step_fraction": 5 / 14},
    )
    assert line == (
        "e2e_latency_p95: p95 resolved at the 14s target in steps of 5s (36%, edges 10s and 15s)"
    )


def test_a_histogram_that_stops_below_the_target_says_the_bound_cannot_fail() -> None:
    line = resolution_line("lat", {"target_seconds": 30.0, "lower_edge": 20.0, "upper_edge": None})
    assert "stops at 20s" in line and "cannot show the canary slower" in line
