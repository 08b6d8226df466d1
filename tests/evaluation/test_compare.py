"""Tests of the field comparison: schema-aware outcomes, strict equality, schema validity."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rolloutd.evaluation.compare import Call, compare_value, parse_number, score_case
from rolloutd.evaluation.suite import SuiteCase

MONEY = {"type": "number"}
DATE = {"type": "string", "format": "date"}
ID = {"type": "string", "pattern": "^ORD-[0-9]{6}$"}
ENUM = {"type": "string", "enum": ["low", "high"]}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": ID,
        "amount": MONEY,
        "when": DATE,
        "priority": ENUM,
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "steps": {"type": "array", "items": {"type": "string"}},
        "contact": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
EXPECTED = {"order_id": "ORD-123456", "amount": 1200, "when": "2025-03-04", "priority": "high"}
CASE = SuiteCase(
    "c",
    1,
    ({"role": "user", "content": "x"},),
    ({"name": "pay", "parameters": SCHEMA},),
    "pay",
    EXPECTED,
)


@pytest.mark.parametrize(
    ("expected", "actual", "schema", "outcome"),
    [
        (1200, 1200.0, MONEY, "correct"),
        (1200, "$1,200.00", MONEY, "format"),
        (1200, "1 200 EUR", MONEY, "format"),
        (1200, "$1,320.00", MONEY, "wrong_value"),
        (1200, 1320, MONEY, "wrong_value"),
        ("2025-03-04", "2025-03-04T00:00:00", DATE, "format"),
        ("2025-03-04", "2025-03-05", DATE, "wrong_value"),
        ("ORD-123456", "ord-123456", ID, "wrong_value"),
        ("high", "High", ENUM, "wrong_value"),
        ("Late delivery", " late delivery ", {"type": "string"}, "format"),
        (["a", "b"], ["b", "a"], SCHEMA["properties"]["tags"], "correct"),
        (["a", "b"], ["b", "a"], SCHEMA["properties"]["steps"], "wrong_value"),
        (["a", "b"], ["a"], SCHEMA["properties"]["tags"], "wrong_value"),
        ({"name": "Ada", "x": 1}, {"x": 1, "name": "Ada"}, {"type": "object"}, "correct"),
        ({"name": "Ada"}, {"name": "ada"}, SCHEMA["properties"]["contact"], "format"),
        ({"name": "Ada"}, {"name": "Bob"}, SCHEMA["properties"]["contact"], "wrong_value"),
    ],
)
def test_values_compare_through_their_schema(
    expected: Any, actual: Any, schema: dict[str, Any], outcome: str
) -> None:
    """Numbers as numbers, dates as dates, ids and enums exactly, sets without order."""
    assert compare_value(expected, actual, schema) == outcome


def test_parse_number_reads_currency_and_separators_only() -> None:
    """Currency symbols, codes and thousands separators are read; words are not numbers."""
    assert parse_number("£75") == 75.0
    assert parse_number("USD 1,200.50") == 1200.5
    assert parse_number("twelve") is None
    assert parse_number("1,20") is None
    assert parse_number(True) is None


def test_a_reordered_call_is_correct_but_fails_strict() -> None:
    """Key order is formatting: schema-aware correct, strict wrong."""
    text = json.dumps(dict(reversed(list(EXPECTED.items()))))
    result = score_case(CASE, Call("pay", text))
    assert (result.outcome, result.exact, result.strict) == ("correct", True, False)
    assert all(field.strict_correct for field in result.fields)


def test_a_formatted_amount_is_a_format_deviation_and_a_schema_violation() -> None:
    """ "$1,200.00" in a number field: the value is right, the schema is not satisfied."""
    result = score_case(CASE, Call("pay", json.dumps({**EXPECTED, "amount": "$1,200.00"})))
    amount = next(field for field in result.fields if field.field == "amount")
    assert (amount.outcome, amount.schema_valid, amount.strict_correct) == ("format", False, False)
    assert result.outcome == "schema_violation"
    assert result.exact is True and result.strict is False


def test_missing_extra_and_wrong_fields_are_attributed() -> None:
    """Each argument gets its own outcome; the case is a wrong value."""
    sent = {"order_id": "ORD-123457", "amount": 1200, "when": "2025-03-04", "note": "x"}
    result = score_case(CASE, Call("pay", json.dumps(sent)))
    outcomes = {field.field: field.outcome for field in result.fields}
    assert outcomes == {
        "order_id": "wrong_value",
        "amount": "correct",
        "when": "correct",
        "priority": "missing",
        "note": "extra",
    }
    assert result.outcome == "schema_violation"  # 'note' is not allowed by the schema
    assert result.exact is False


def test_wrong_tool_no_call_and_unparseable_arguments() -> None:
    """Another tool, no call and arguments that are not JSON are told apart."""
    assert score_case(CASE, Call("refund", "{}")).outcome == "wrong_tool"
    assert score_case(CASE, Call(None)).outcome == "no_call"
    broken = score_case(CASE, Call("pay", '{"order_id": "ORD-123456", "amo'))
    assert (broken.outcome, broken.schema_valid, broken.exact) == ("schema_violation", False, False)


def test_arguments_nested_deeper_than_a_suite_may_are_a_schema_violation_unscored() -> None:
    """Arguments 100 levels deep are a malformed call: not compared field by field, since the
    comparison recurses through them."""
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    result = score_case(CASE, Call("pay", json.dumps({**EXPECTED, "tags": deep})))
    assert (result.outcome, result.exact, result.fields[0].outcome) == (
        "schema_violation",
        False,
        "missing",
    )
    assert result.schema_errors == ("the arguments nest lists and objects deeper than 64 levels",)
