"""What every plan section shares: strict frozen models, durations and names."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import timedelta
from typing import Annotated, TypeVar

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


Sections = MutableMapping[tuple[type, int], "_Spec"]
"""Plan sections by type and the hash of their content, for :func:`share_sections` (a
weak-valued map lets the sections no plan uses any more go)."""

S = TypeVar("S", bound=_Spec)


def share_sections(model: S, kept: Sections) -> S:
    """``model`` with every section equal to one in ``kept`` replaced by that one, and its
    own new sections added to ``kept``; returns the kept equal of ``model`` itself, if any.

    A leader keeps the plans of thousands of rollouts, most of them copies of a few with
    another name and paths: their gates, steps, pools and limits are equal, and frozen, so
    one instance of each serves every plan. ``model`` must be freshly parsed, not yet seen
    by anyone: its fields are replaced in place.
    """
    for name, value in model.__dict__.items():
        shared = _shared(value, kept)
        if shared is not value:
            model.__dict__[name] = shared  # frozen for its users; this is its parse
    key = (type(model), hash(repr(model)))
    found = kept.get(key)
    if found is not None and found == model:  # equal, not only of the same hash
        return found
    kept[key] = model
    return model


def _shared(value: object, kept: Sections) -> object:
    if isinstance(value, _Spec):
        return share_sections(value, kept)
    if isinstance(value, dict):
        items = {k: _shared(v, kept) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if type(value) in (list, tuple):
        assert isinstance(value, list | tuple)
        shared = [_shared(v, kept) for v in value]
        if all(s is v for s, v in zip(shared, value, strict=True)):
            return value
        return type(value)(shared)
    return value
