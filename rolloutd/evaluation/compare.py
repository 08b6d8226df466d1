"""Scoring one tool call against the expected one: schema-aware, field by field, and strict.

The schema-aware comparison reads each argument through its JSON Schema:

* ``number``/``integer``: compared as numbers (1200 and 1200.0 are the same). A string
  such as ``"$1,200.00"`` or ``"1 200 EUR"`` is parsed (currency symbols and codes,
  thousands separators) and, when it holds the right number, is a *format* deviation.
* ``object``: key order is ignored; properties are compared through their own schemas.
* ``array``: order is kept, unless the schema says ``uniqueItems`` (then it is a set).
* ``enum`` and ``pattern`` (record ids) and ``const``: exact.
* ``string`` with ``format: date`` / ``date-time``: compared as dates; another spelling of
  the same date is a format deviation.
* other strings (free text): case and spacing are format, anything else a wrong value.

Separately, the call is validated against the tool's schema with jsonschema (``format`` is an
annotation there, as in the default vocabulary of draft 2020-12, so the schema verdict
matches what a gateway validating the live traffic reports). A format deviation may also be
a schema violation (a number sent as a string is both).

*Strict* mode is the naive score kept beside it for contrast: the arguments, serialised as
JSON in the order the engine wrote them, must equal the expected arguments serialised the
same way.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rolloutd.core.suite_outcomes import FIELD_OUTCOMES, CaseOutcome, FieldOutcome
from rolloutd.evaluation.suite import MAX_DEPTH, SuiteCase, nests_deeper
from rolloutd.gates import toolcalls
from rolloutd.gates.toolcalls import parse_arguments, same_json, schema_validator

GOOD_FIELD: frozenset[str] = frozenset({"correct", "format"})

_NUMBER = re.compile(
    r"^\s*(?:[A-Z]{3}\s*)?[$€£¥]?\s*(-?[0-9]{1,3}(?:[, ][0-9]{3})+|-?[0-9]+)(\.[0-9]+)?"
    r"\s*(?:[A-Z]{3}|[$€£¥])?\s*$"
)


@dataclass(frozen=True)
class FieldResult:
    """One argument of one call: how it compares, and whether it satisfies its schema."""

    field: str
    outcome: FieldOutcome
    schema_valid: bool
    strict_correct: bool
    expected: Any = None
    actual: Any = None

    @property
    def good(self) -> bool:
        """Right value, whatever its spelling."""
        return self.outcome in GOOD_FIELD


@dataclass(frozen=True)
class Call:
    """What the engine answered: a tool name and its raw JSON arguments, or no call."""

    name: str | None
    arguments: str | None = None


@dataclass(frozen=True)
class CaseResult:
    """One case's result: the outcome, both scores, and the per-field verdicts.

    ``exact`` is the schema-aware score (right tool, every expected argument with the right
    value, nothing missing or extra); ``strict`` the naive one. Both are None for a request
    error: the case was not measured, so it counts for neither build.
    """

    case_id: str
    outcome: CaseOutcome
    expected_tool: str
    exact: bool | None
    strict: bool | None
    schema_valid: bool | None
    fields: tuple[FieldResult, ...] = ()
    tool: str | None = None
    arguments: str | None = None
    schema_errors: tuple[str, ...] = ()
    error: str | None = None
    attempts: int = 1
    latency_s: float | None = None

    @property
    def measured(self) -> bool:
        """Whether the endpoint answered at all (request errors are not judged)."""
        return self.outcome != "request_error"

    def field_key(self, result: FieldResult) -> str:
        """The name a field is reported under: ``tool.argument``."""
        return f"{self.expected_tool}.{result.field}"


def request_error(case: SuiteCase, reason: str, attempts: int) -> CaseResult:
    """The result of a case the endpoint never answered usably."""
    return CaseResult(
        case.id,
        "request_error",
        case.expected_name,
        None,
        None,
        None,
        error=reason,
        attempts=attempts,
    )


def score_case(case: SuiteCase, call: Call) -> CaseResult:
    """Compare ``call`` with the case's expected call."""
    expected = case.expected_arguments
    if call.name is None:
        fields = tuple(_missing(key, value) for key, value in expected.items())
        return CaseResult(case.id, "no_call", case.expected_name, False, False, None, fields)
    if call.name != case.expected_name:
        fields = tuple(_missing(key, value) for key, value in expected.items())
        return CaseResult(
            case.id, "wrong_tool", case.expected_name, False, False, None, fields, call.name
        )
    schema = case.schema_of(call.name) or {}
    text = call.arguments or ""
    arguments = _read_arguments(text)
    if isinstance(arguments, str):
        fields = tuple(_missing(key, value) for key, value in expected.items())
        return CaseResult(
            case.id,
            "schema_violation",
            case.expected_name,
            False,
            False,
            False,
            fields,
            call.name,
            text,
            (arguments,),
        )
    errors = _schema_errors(arguments, schema)
    invalid = {path for path, _ in errors}
    properties: Mapping[str, Any] = schema.get("properties", {})
    results: list[FieldResult] = []
    for key, want in expected.items():
        if key not in arguments:
            results.append(_missing(key, want))
            continue
        got = arguments[key]
        verdict = compare_value(want, got, properties.get(key, {}))
        strict = _canonical(want) == _canonical(got)
        results.append(FieldResult(key, verdict, key not in invalid, strict, want, got))
    for key, got in arguments.items():
        if key not in expected:
            results.append(FieldResult(key, "extra", key not in invalid, False, None, got))
    exact = all(result.good for result in results)
    # Serialised in the engine's key order: reordered keys fail, as a plain string compare would.
    strict_case = _canonical(arguments) == _canonical(expected)
    if errors:
        outcome: CaseOutcome = "schema_violation"
    elif not exact:
        outcome = "wrong_value"
    elif all(result.outcome == "correct" for result in results):
        outcome = "correct"
    else:
        outcome = "format"
    return CaseResult(
        case.id,
        outcome,
        case.expected_name,
        exact,
        strict_case,
        not errors,
        tuple(results),
        call.name,
        text,
        tuple(message for _, message in errors),
    )


def _read_arguments(text: str) -> dict[str, Any] | str:
    """The answered arguments, or why they cannot be scored.

    The comparison and the schema check recurse through the arguments: nesting deeper than
    any suite case may is a malformed call, not a reason to exhaust the stack.
    """
    too_deep = f"the arguments nest lists and objects deeper than {MAX_DEPTH} levels"
    try:
        arguments = parse_arguments(text)
    except RecursionError:
        return too_deep
    if arguments is None:
        return "the arguments are not a JSON object"
    return too_deep if nests_deeper(arguments, MAX_DEPTH) else arguments


def compare_value(expected: Any, actual: Any, schema: Mapping[str, Any]) -> FieldOutcome:
    """``correct``, ``format`` or ``wrong_value`` for one value under its schema."""
    if "enum" in schema or "const" in schema or "pattern" in schema:
        # Ids and closed vocabularies have no other spelling: near is wrong.
        return "correct" if same_json(expected, actual) else "wrong_value"
    kind = schema.get("type")
    if kind in ("number", "integer"):
        return _compare_number(expected, actual)
    if kind == "object" or (isinstance(expected, dict) and kind is None):
        return _compare_object(expected, actual, schema)
    if kind == "array" or (isinstance(expected, list) and kind is None):
        return _compare_array(expected, actual, schema)
    if same_json(expected, actual):
        return "correct"
    if isinstance(expected, str) and isinstance(actual, str):
        if schema.get("format") in ("date", "date-time"):
            same = _when(expected) is not None and _when(expected) == _when(actual)
            return "format" if same else "wrong_value"
        same_text = " ".join(expected.split()).casefold() == " ".join(actual.split()).casefold()
        return "format" if same_text else "wrong_value"
    if isinstance(expected, bool) and isinstance(actual, str):
        return "format" if actual.strip().lower() == str(expected).lower() else "wrong_value"
    return "wrong_value"


def parse_number(value: object) -> float | None:
    """A number, or a string that spells one (``"$1,200.00"``, ``"1 200"``, ``"EUR 50"``)."""
    return toolcalls.parse_number(value, _NUMBER)


def _compare_number(expected: Any, actual: Any) -> FieldOutcome:
    want = parse_number(expected)
    if isinstance(actual, int | float) and not isinstance(actual, bool):
        return "correct" if want is not None and float(actual) == want else "wrong_value"
    got = parse_number(actual)
    return "format" if want is not None and got == want else "wrong_value"


def _compare_object(expected: Any, actual: Any, schema: Mapping[str, Any]) -> FieldOutcome:
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return "correct" if same_json(expected, actual) else "wrong_value"
    if set(expected) != set(actual):
        return "wrong_value"
    properties: Mapping[str, Any] = schema.get("properties", {})
    outcomes = [compare_value(expected[k], actual[k], properties.get(k, {})) for k in expected]
    return _worst(outcomes)


def _compare_array(expected: Any, actual: Any, schema: Mapping[str, Any]) -> FieldOutcome:
    if not isinstance(expected, list) or not isinstance(actual, list):
        return "correct" if same_json(expected, actual) else "wrong_value"
    if len(expected) != len(actual):
        return "wrong_value"
    raw_items = schema.get("items")
    items: Mapping[str, Any] = raw_items if isinstance(raw_items, dict) else {}
    if schema.get("uniqueItems"):
        # A set: match each expected item with an unused actual one, best match first.
        remaining = list(actual)
        outcomes: list[FieldOutcome] = []
        for want in expected:
            scored = [
                (_RANK[compare_value(want, got, items)], i) for i, got in enumerate(remaining)
            ]
            rank, index = min(scored)
            outcomes.append(FIELD_OUTCOMES[rank] if rank < 2 else "wrong_value")
            remaining.pop(index)
        return _worst(outcomes)
    return _worst([compare_value(w, g, items) for w, g in zip(expected, actual, strict=True)])


_RANK: dict[FieldOutcome, int] = {"correct": 0, "format": 1, "wrong_value": 2}


def _worst(outcomes: list[FieldOutcome]) -> FieldOutcome:
    if any(outcome not in GOOD_FIELD for outcome in outcomes):
        return "wrong_value"
    return "format" if "format" in outcomes else "correct"


def _when(text: str) -> dt.date | dt.datetime | None:
    value = text.strip()
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.time() == dt.time(0) and moment.tzinfo is None:
        return moment.date()
    return moment


def _missing(key: str, expected: Any) -> FieldResult:
    return FieldResult(key, "missing", False, False, expected, None)


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _schema_errors(arguments: dict[str, Any], schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every schema violation as (the top-level argument it concerns, or "", the message)."""
    found: list[tuple[str, str]] = []
    for error in schema_validator(schema).iter_errors(arguments):
        if error.path:
            found.append((str(error.path[0]), error.message))
        elif error.validator == "required":
            missing = [key for key in error.validator_value if key not in arguments]
            found += [(key, error.message) for key in missing] or [("", error.message)]
        elif error.validator == "additionalProperties":
            allowed = set(schema.get("properties", {}))
            extra = [key for key in arguments if key not in allowed]
            found += [(key, error.message) for key in extra] or [("", error.message)]
        else:
            found.append(("", error.message))
    return found
