"""The test services' own rules: missing binaries under CI, and the binomial range."""

from __future__ import annotations

import itertools

import pytest

from tests.routers import services
from tests.routers.services import binomial_interval, find_binary, session_ids


def test_a_missing_binary_fails_the_test_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """With CI set, a proxy that is not installed is a failure, never a quiet skip."""
    monkeypatch.setattr(services, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="install haproxy"):
        find_binary("haproxy")


def test_a_missing_binary_fails_the_test_without_ci_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a developer machine without nginx the real-server tests fail as well, saying how
    to get it: a machine missing a service must never pass the suite."""
    monkeypatch.setattr(services, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.fail.Exception, match="nginx is not installed: install nginx"):
        find_binary("nginx")


def test_the_binomial_range_matches_the_exact_quantiles() -> None:
    """The 99.9% ranges are Binomial(2000, p)'s 0.05% and 99.95% quantiles (as scipy gives)."""
    assert binomial_interval(2000, 0.05) == (69, 133)
    assert binomial_interval(2000, 0.25) == (437, 565)


def test_session_ids_are_distinct_and_repeatable() -> None:
    """The same seed gives the same 2,000 distinct ids."""
    assert len(set(session_ids(2000))) == 2000
    assert session_ids(5) == session_ids(5)


def test_a_port_handed_out_is_not_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port is handed out long before its service binds it (the e2e daemon's, after HAProxy
    and Prometheus have started): the draw must not give it to another service meanwhile."""
    draws = iter([20308, 20308, 20309])
    monkeypatch.setattr(services, "_draw", lambda low, high: next(draws))
    monkeypatch.setattr(services, "_handed", set())
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert [services.free_port(), services.free_port()] == [20308, 20309]


def test_each_test_worker_draws_from_a_range_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pytest-xdist workers never hand out the same port: the range is split by worker."""
    ranges = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        ranges.append(services.port_range())
    assert ranges[0][0] == 20000 and ranges[-1][1] == 31999
    for (_, high), (low, _) in itertools.pairwise(ranges):
        assert high + 1 == low
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert services.port_range() == (20000, 31999)
