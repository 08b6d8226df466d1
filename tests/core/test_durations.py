"""Tests for rolloutd.core.durations: how operators write durations in plans."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutd.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("90m", timedelta(minutes=90)),
        ("48h", timedelta(hours=48)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("1y", timedelta(days=365)),
        ("500ms", timedelta(milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
        ("1m5s", timedelta(minutes=1, seconds=5)),
        ("  48h\n", timedelta(hours=48)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
    ],
)
def test_parse_duration_reads_number_unit_parts(text: str, expected: timedelta) -> None:
    """Each documented form, alone or combined, parses to the timedelta it names."""
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "48", "forever", "h", "-1h", "1H", "1e3h", "48 hours", "1.5.5h", "h48", "1h30"],
)
def test_parse_duration_rejects_text_that_is_not_number_unit_parts(text: str) -> None:
    """Bare numbers, unknown units, signs and trailing junk are a ValueError naming the text."""
    with pytest.raises(ValueError, match="expected a duration such as") as info:
        parse_duration(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("text", ["1000000000d", "99999999999999999999999s", "1" + "0" * 400 + "s"])
def test_parse_duration_reports_a_too_long_duration_as_a_value_error(text: str) -> None:
    """A duration longer than a timedelta can hold is rejected as bad input, not a crash."""
    with pytest.raises(ValueError):
        parse_duration(text)


def test_parse_duration_does_not_join_a_number_to_a_unit_across_a_space() -> None:
    """'1m s' is garbage rather than one millisecond."""
    with pytest.raises(ValueError):
        parse_duration("1m s")


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(hours=48), "2d"),
        (timedelta(days=7, seconds=1), "7d1s"),
    ],
)
def test_format_duration_renders_compact_text(delta: timedelta, text: str) -> None:
    """Durations render as the largest units first, with zero parts left out."""
    assert format_duration(delta) == text


@given(st.integers(min_value=0, max_value=10 * 365 * 86400))
def test_format_duration_is_the_inverse_of_parse_duration_for_whole_seconds(seconds: int) -> None:
    """Formatting then parsing any whole number of seconds gives back the same duration."""
    delta = timedelta(seconds=seconds)
    assert parse_duration(format_duration(delta)) == delta
