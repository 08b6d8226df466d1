"""Failpoints: off unless armed, a typo refused, and an armed point acts."""

from __future__ import annotations

import pytest

from rolloutd import failpoints
from rolloutd.errors import BadInput


def test_an_unknown_point_or_action_is_refused_naming_the_variable() -> None:
    with pytest.raises(BadInput, match="ROLLOUTD_FAILPOINTS: before_router_wrte: no such"):
        failpoints.parse("before_router_wrte=stop")
    with pytest.raises(BadInput, match="action must be one of stop, stop-once, raise"):
        failpoints.parse("before_router_write=pause")
    assert failpoints.parse("") == {}
    assert failpoints.parse("before_router_write=stop-once") == {"before_router_write": "stop-once"}


def test_an_unarmed_point_does_nothing_and_an_armed_one_acts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(failpoints.ENV, raising=False)
    assert failpoints.arm() == {}
    failpoints.hit("before_router_write")
    monkeypatch.setenv(failpoints.ENV, "before_router_write=raise")
    try:
        assert failpoints.arm() == {"before_router_write": "raise"}
        with pytest.raises(failpoints.FailpointError, match="before_router_write"):
            failpoints.hit("before_router_write")
    finally:
        monkeypatch.delenv(failpoints.ENV)
        failpoints.arm()
    failpoints.hit("before_router_write")
