"""Schema-aware comparison of one tool call with the expected one, field by field.

A field is *exact* when it equals the expected value as JSON, a *format* deviation when it
equals it after normalisation (``"$1,200.00"`` for 1200, ``"2025-03-04T00:00:00"`` for a
date, case and spacing of free text), and a *value* error otherwise. Schema validity is
judged separately with jsonschema: a format deviation may still violate the schema (a
number sent as a string does).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rolloutd.gates.toolcalls import parse_arguments, parse_number, same_json, schema_validator

# parse_arguments comes from rolloutd.gates.toolcalls; the demo reads it from here.
__all__ = [
    "CallScore",
    "Verdict",
    "compare_field",
    "normalise",
    "parse_arguments",
    "schema_errors",
    "score_call",
]

Verdict = Literal["exact", "format", "value", "missing", "extra"]

_MONEY = re.compile(r"^\s*[$€£]?\s*(-?[0-9][0-9,]*)(\.[0-9]+)?\s*(?:USD|EUR|GBP)?\s*$")


@dataclass(frozen=True)
class CallScore:
    """How one tool call compares with the expected one."""

    tool_correct: bool
    parsed: bool
    schema_valid: bool
    fields: Mapping[str, Verdict]

    @property
    def exact(self) -> bool:
        """Right tool, parseable arguments, every field exact and nothing extra."""
        return (
            self.tool_correct
            and self.parsed
            and all(verdict == "exact" for verdict in self.fields.values())
        )

    def count(self, verdict: Verdict) -> int:
        """How many fields got ``verdict``."""
        return sum(1 for value in self.fields.values() if value == verdict)


def schema_errors(arguments: object, schema: Mapping[str, Any]) -> list[str]:
    """Every way ``arguments`` violates ``schema``, as readable messages (empty: valid)."""
    return [error.message for error in schema_validator(schema).iter_errors(arguments)]


def score_call(
    expected_name: str,
    expected_arguments: Mapping[str, Any],
    name: str,
    arguments_json: str,
    schema: Mapping[str, Any],
) -> CallScore:
    """Compare an actual call (arguments as the JSON string the engine sent) with the
    expected one under the tool's schema."""
    arguments = parse_arguments(arguments_json)
    if arguments is None:
        fields: dict[str, Verdict] = dict.fromkeys(expected_arguments, "missing")
        return CallScore(name == expected_name, False, False, fields)
    properties: Mapping[str, Any] = schema.get("properties", {})
    fields = {}
    for key, want in expected_arguments.items():
        if key not in arguments:
            fields[key] = "missing"
        else:
            fields[key] = compare_field(want, arguments[key], properties.get(key, {}))
    for key in arguments:
        if key not in expected_arguments:
            fields[key] = "extra"
    valid = not schema_errors(arguments, schema)
    return CallScore(name == expected_name, True, valid, fields)


def compare_field(expected: object, actual: object, field_schema: Mapping[str, Any]) -> Verdict:
    """Exact, format deviation or value error for one field."""
    if same_json(expected, actual):
        return "exact"
    if normalise(expected, field_schema) == normalise(actual, field_schema) is not None:
        return "format"
    return "value"


def normalise(value: object, field_schema: Mapping[str, Any]) -> object:
    """The canonical form of a field value for a format-insensitive comparison."""
    kind = field_schema.get("type")
    if kind in {"number", "integer"}:
        return parse_number(value, _MONEY)
    if isinstance(value, str) and field_schema.get("format") == "date":
        return _date(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    return value


def _date(value: str) -> str | None:
    text = value.strip()
    for candidate in (text, text[:10]):
        try:
            return dt.date.fromisoformat(candidate).isoformat()
        except ValueError:
            continue
    return None
