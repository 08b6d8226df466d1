"""The test services' own rules: missing binaries under CI, and the binomial range."""

from __future__ import annotations

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
