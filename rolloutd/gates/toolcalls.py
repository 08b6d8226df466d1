"""Reading a tool call as JSON: its arguments, their schema, their values.

Two places judge tool calls: the suite gate (``rolloutd.evaluation.compare``) and the
simulated gateway whose counts the schema gates read (``rolloutd.sim.scoring``). They differ
in what they report, but a call's arguments parse, validate against the tool's JSON Schema
and compare as JSON the same way in both, so a schema violation in a suite run is the same
thing as one in the live counts. Both build on this module; neither may import the other.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator


def parse_arguments(text: str) -> dict[str, Any] | None:
    """The arguments object of a tool call, or None when it is not a JSON object."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def schema_validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator for ``schema`` (draft 2020-12, ``format`` as an annotation), made once
    per schema: a run validates every call of a tool against the same one."""
    return _validator(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=256)
def _validator(schema: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema))


def same_json(expected: Any, actual: Any) -> bool:
    """Whether two values are equal as JSON: 1 and 1.0 are, 1 and true are not."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(expected) == float(actual)
    return type(expected) is type(actual) and bool(expected == actual)


def parse_number(value: object, spelling: re.Pattern[str]) -> float | None:
    """A JSON number, or a string that ``spelling`` matches: its group 1 the whole part,
    with ``,`` or a space between the thousands, its group 2 the fraction (with the point)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and (match := spelling.match(value)):
        whole = match.group(1).replace(",", "").replace(" ", "")
        return float(whole + (match.group(2) or ""))
    return None
