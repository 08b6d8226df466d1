"""Quality profiles: how a simulated engine build answers a tool call it knows the answer to.

* ``exact``: the right tool with exactly the expected arguments.
* ``int4-like``: what an aggressively quantised build does: keys reordered, free text and
  dates reformatted, nested objects' keys and sets (``uniqueItems`` arrays) reordered (~15%
  of such fields), rarely a number rendered as ``"$1,200.00"`` (which also violates the
  schema), and ~3% of fields with a real error in a copied value (amount off, date shifted,
  record id with a digit changed, another enum value, a count off by one, an item dropped).
* ``broken-schema``: every call violates the tool's JSON schema (wrong type, missing
  required key, unknown key, value outside the enum, or arguments that are not JSON).

Fault knobs add to any profile: a schema-violation rate, an exactness drop (a share of calls
with one wrong value) and a hand-off rate (the model gives up and asks for a human).
Every draw comes from the caller's seeded generator, so an answer is a function of the seed
and the request.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Profile = Literal["exact", "int4-like", "broken-schema"]
PROFILES: tuple[Profile, ...] = ("exact", "int4-like", "broken-schema")

HANDOFF_TEXT = "I can't complete this safely. Let me hand you over to a human colleague."

INT4_FORMAT_RATE = 0.15
INT4_NUMBER_FORMAT_RATE = 0.02
INT4_VALUE_ERROR_RATE = 0.03


@dataclass(frozen=True)
class Answer:
    """The assistant's turn: a tool call (name and JSON arguments) or a hand-off message."""

    tool: str | None
    arguments: str = ""
    content: str | None = None
    mutations: tuple[str, ...] = ()


def answer(
    profile: Profile,
    expected: Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]],
    rng: random.Random,
    *,
    schema_violation_rate: float = 0.0,
    exactness_drop: float = 0.0,
    handoff_rate: float = 0.0,
) -> Answer:
    """Answer one request under ``profile``; ``expected`` is ``{"name", "arguments"}``.

    Without an expected call the first offered tool is called with arguments made up
    from its schema; without tools the model replies in text.
    """
    if not tools:
        return Answer(None, content="Done.")
    if rng.random() < handoff_rate:
        return Answer(None, content=HANDOFF_TEXT, mutations=("handoff",))
    schemas = {str(t["name"]): dict(t.get("parameters", {})) for t in tools}
    if expected is not None and expected.get("name") in schemas:
        name = str(expected["name"])
        arguments = dict(expected.get("arguments", {}))
    else:
        name = next(iter(schemas))
        arguments = _invent(schemas[name])
    properties: dict[str, Any] = schemas[name].get("properties", {})
    mutations: list[str] = []
    if profile == "int4-like":
        for key in list(arguments):
            field = properties.get(key, {})
            draw = rng.random()
            if draw < INT4_VALUE_ERROR_RATE:
                arguments[key] = _wrong_value(arguments[key], field, rng)
                mutations.append(f"value:{key}")
            elif draw < INT4_VALUE_ERROR_RATE + _format_rate(field):
                arguments[key] = _reformat(arguments[key], field, rng)
                mutations.append(f"format:{key}")
        keys = list(arguments)
        rng.shuffle(keys)
        arguments = {key: arguments[key] for key in keys}
    if arguments and rng.random() < exactness_drop:
        key = rng.choice(sorted(arguments))
        arguments[key] = _wrong_value(arguments[key], properties.get(key, {}), rng)
        mutations.append(f"value:{key}")
    if profile == "broken-schema" or rng.random() < schema_violation_rate:
        text, how = _break_schema(arguments, properties, rng)
        return Answer(name, text, mutations=(*mutations, f"schema:{how}"))
    return Answer(name, json.dumps(arguments), mutations=tuple(mutations))


def _kind(field: Mapping[str, Any]) -> str:
    if field.get("type") in ("number", "integer"):
        return "number"
    if field.get("type") in ("object", "array"):
        return str(field["type"])
    if "enum" in field:
        return "enum"
    if field.get("format") == "date":
        return "date"
    if "pattern" in field:
        return "id"
    return "text"


def _format_rate(field: Mapping[str, Any]) -> float:
    kind = _kind(field)
    if kind == "number":
        return INT4_NUMBER_FORMAT_RATE
    if kind == "array" and not field.get("uniqueItems"):
        return 0.0  # an ordered list has no other spelling
    # Enums and ids have no schema-valid alternative spelling; leave them alone.
    return INT4_FORMAT_RATE if kind in ("date", "text", "object", "array") else 0.0


def _reformat(value: Any, field: Mapping[str, Any], rng: random.Random) -> Any:
    kind = _kind(field)
    if kind == "number":
        return f"${float(value):,.2f}" if rng.random() < 0.7 else str(value)
    if kind == "date":
        return f"{value}T00:00:00"
    if kind == "object" and isinstance(value, dict):
        keys = sorted(value, reverse=True)
        return {key: value[key] for key in keys}
    if kind == "array" and isinstance(value, list):
        return list(reversed(value))
    lowered = str(value).lower()
    return lowered if lowered != value and rng.random() < 0.5 else f" {value} "


def _wrong_value(value: Any, field: Mapping[str, Any], rng: random.Random) -> Any:
    kind = _kind(field)
    if field.get("type") == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value + rng.choice([-1, 1, 2])
    if kind == "object" and isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        return {
            **value,
            key: _wrong_value(value[key], field.get("properties", {}).get(key, {}), rng),
        }
    if kind == "array" and isinstance(value, list) and value:
        return value[:-1] if len(value) > 1 else [*value, *value]
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        factor = rng.choice([0.9, 1.1, 10.0, 0.5])
        return round(float(value) * factor + rng.choice([0, 1]), 2)
    if kind == "date" and isinstance(value, str):
        try:
            day = dt.date.fromisoformat(value[:10])
        except ValueError:
            return value + "-x"
        return (day + dt.timedelta(days=rng.choice([-2, -1, 1, 2, 7]))).isoformat()
    if kind == "enum":
        others = [option for option in field["enum"] if option != value]
        return rng.choice(others) if others else value
    text = str(value)
    digits = [index for index, char in enumerate(text) if char.isdigit()]
    if digits:
        index = rng.choice(digits)
        new = rng.choice([d for d in "0123456789" if d != text[index]])
        return text[:index] + new + text[index + 1 :]
    if kind == "id" and text[::-1] != text:
        return text[::-1]
    words = text.split()
    return " ".join(words[:-1]) if len(words) > 1 else "not " + text


def _break_schema(
    arguments: dict[str, Any], properties: Mapping[str, Any], rng: random.Random
) -> tuple[str, str]:
    broken = dict(arguments)
    how = rng.choice(["wrong_type", "missing_required", "unknown_key", "enum", "not_json"])
    enums = [key for key in broken if _kind(properties.get(key, {})) == "enum"]
    if how == "enum" and not enums:
        how = "wrong_type"
    if how == "missing_required" and broken:
        del broken[rng.choice(sorted(broken))]
    elif how == "unknown_key":
        broken["confirmed_by_user"] = True
    elif how == "enum":
        broken[rng.choice(enums)] = "other"
    elif how == "not_json":
        return json.dumps(broken)[:-2], how
    else:
        how = "wrong_type"
        key = rng.choice(sorted(broken)) if broken else "value"
        current = broken.get(key)
        if isinstance(current, int | float) and not isinstance(current, bool):
            broken[key] = str(current)
        else:
            broken[key] = [current]
    return json.dumps(broken), how


def _invent(schema: Mapping[str, Any]) -> dict[str, Any]:
    made: dict[str, Any] = {}
    for key, field in schema.get("properties", {}).items():
        kind = _kind(field)
        made[key] = {
            "number": 100,
            "enum": (field.get("enum") or [""])[0],
            "date": "2025-01-01",
            "id": "GB" if field.get("pattern") == "^[A-Z]{2}$" else "ACC-100000",
            "text": "n/a",
        }[kind]
    return made
