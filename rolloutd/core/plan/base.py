"""What every plan section shares: strict frozen models, durations and names."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from rolloutd.core.durations import format_duration, parse_duration
from rolloutd.core.urls import url_problem


def _duration(value: object) -> object:
    # Plans write durations as text ('48h'); a bare number is ambiguous (seconds? hours?).
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected a duration such as '30s', '90m' or '48h', got {value!r}")


# Written back in the plan's own notation, so a dumped plan loads again.
Duration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]


def _connectable(url: str) -> str:
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(problem)
    return url


# An endpoint the daemon will connect to: a port past 65535 or a broken IPv6 host is a
# problem with the plan, not an error at the first tick.
HttpUrl = Annotated[str, Field(pattern=r"^https?://\S+$"), AfterValidator(_connectable)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class _Spec(BaseModel):
    """Plan sections reject unknown keys and do not coerce types ('5' is not 5)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
