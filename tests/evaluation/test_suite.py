"""Tests of suite loading: the example suite, and malformed suites refused with line and field."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rolloutd.errors import BadInput
from rolloutd.evaluation.suite import Suite, load_suite, parse_suite
from tests.evaluation.conftest import EXAMPLE


def _case(case_id: str = "c-1", **changes: Any) -> dict[str, Any]:
    case: dict[str, Any] = {
        "id": case_id,
        "messages": [{"role": "user", "content": "Refund 20 USD on ORD-123456"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "refund",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "order_id": {"type": "string"},
                            "amount": {"type": "number"},
                        },
                        "required": ["order_id", "amount"],
                    },
                },
            }
        ],
        "expected": {"name": "refund", "arguments": {"order_id": "ORD-123456", "amount": 20}},
    }
    case.update(changes)
    return case


def _problems(lines: list[str]) -> list[str]:
    with pytest.raises(BadInput) as caught:
        parse_suite("\n".join(lines).encode(), "s.jsonl")
    return [str(problem) for problem in caught.value.problems]


def test_the_example_suite_has_300_cases_in_four_kinds(example_suite: Suite) -> None:
    """75 payouts, refunds, bookings and lookups, unique ids, a digest of the bytes."""
    assert len(example_suite) == 300
    kinds = Counter(case.tags[0] for case in example_suite.cases)
    assert kinds == {"payouts": 75, "refunds": 75, "bookings": 75, "lookups": 75}
    assert len({case.id for case in example_suite.cases}) == 300
    assert len(example_suite.sha256) == 64


def test_the_example_suite_is_what_the_generator_writes() -> None:
    """The committed file is the generator's output (the generator is deterministic)."""
    script = EXAMPLE.with_name("generate.py")
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_example_cases_state_the_amount_in_the_context_and_expect_a_number(
    example_suite: Suite,
) -> None:
    """Amounts appear formatted ("$1,200.00") in the message and as JSON numbers in the call."""
    payouts = [case for case in example_suite.cases if case.expected_name == "issue_payout"]
    formatted = 0
    for case in payouts:
        amount = case.expected_arguments["amount"]
        assert isinstance(amount, int | float)
        text = case.messages[-1]["content"]
        formatted += f"{amount:,}" in text or f"{amount:,.2f}" in text
    assert formatted == len(payouts)


def test_bad_json_is_reported_with_its_line() -> None:
    """A line that is not JSON names the file and line."""
    problems = _problems([json.dumps(_case("a")), "{not json", json.dumps(_case("b"))])
    assert len(problems) == 1
    assert problems[0].startswith("s.jsonl:2: not valid JSON")


def test_a_missing_expected_call_is_reported() -> None:
    """A case without 'expected' names the field."""
    case = _case()
    del case["expected"]
    assert _problems([json.dumps(case)]) == [
        "s.jsonl:1: expected: required: the expected call, {'name', 'arguments'}"
    ]


def test_a_schema_that_is_not_json_schema_is_reported() -> None:
    """A tool whose parameters are not valid JSON Schema names the tool and the keyword."""
    case = _case()
    case["tools"][0]["function"]["parameters"]["properties"]["amount"]["type"] = "money"
    (problem,) = _problems([json.dumps(case)])
    assert problem.startswith("s.jsonl:1: tools[0].parameters['properties']['amount']['type']")
    assert "not a valid JSON Schema" in problem


def test_duplicate_ids_name_both_lines() -> None:
    """The second use of an id is refused, pointing at the first."""
    problems = _problems([json.dumps(_case("x")), "", json.dumps(_case("x"))])
    assert problems == ["s.jsonl:3: id: duplicate id 'x' (first on line 1)"]


def test_an_expected_call_that_violates_its_own_schema_is_refused() -> None:
    """The expected arguments must satisfy the tool's schema (a suite bug otherwise)."""
    case = _case(expected={"name": "refund", "arguments": {"order_id": "ORD-1", "amount": "20"}})
    (problem,) = _problems([json.dumps(case)])
    assert problem.startswith("s.jsonl:1: expected.arguments.amount: violates the schema")


def test_an_expected_tool_that_is_not_offered_is_refused() -> None:
    """The expected call must name one of the case's tools."""
    case = _case(expected={"name": "payout", "arguments": {}})
    assert _problems([json.dumps(case)]) == [
        "s.jsonl:1: expected.name: 'payout' is not one of the case's tools (refund)"
    ]


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    """Problems on several lines are all listed, in line order."""
    problems = _problems(["[]", json.dumps(_case("ok")), json.dumps(_case("", tags="x"))])
    assert [p.split(": ")[0] for p in problems] == ["s.jsonl:1", "s.jsonl:3"]


def test_an_empty_or_missing_file_is_refused(tmp_path: Path) -> None:
    """No cases, or no file, is bad input naming the file."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(BadInput, match=r"empty\.jsonl: the suite has no cases"):
        load_suite(empty)
    with pytest.raises(BadInput, match=r"missing\.jsonl: cannot read the suite"):
        load_suite(tmp_path / "missing.jsonl")


def test_a_line_nested_past_the_recursion_limit_is_refused_with_its_line() -> None:
    """A line of 100,000 '[' is a problem on its line, not a RecursionError."""
    problems = _problems([json.dumps(_case("a")), "[" * 100_000])
    assert problems == ["s.jsonl:2: nests lists and objects deeper than 64 levels"]


def test_a_schema_nested_deeper_than_the_limit_is_refused_before_jsonschema_reads_it() -> None:
    """Valid JSON 400 objects deep would exhaust the stack in the schema check: refused."""
    case = _case()
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        schema = {"type": "object", "properties": {"a": schema}}
    case["tools"][0]["function"]["parameters"]["properties"]["deep"] = schema
    assert _problems([json.dumps(case)]) == [
        "s.jsonl:1: nests lists and objects deeper than 64 levels"
    ]


def test_a_schema_nested_within_the_limit_is_read() -> None:
    """Twenty levels of nested objects, deeper than any real tool call, load and check."""
    schema: dict[str, Any] = {"type": "string"}
    value: Any = "x"
    for _ in range(20):
        schema = {"type": "object", "properties": {"a": schema}}
        value = {"a": value}
    case = _case()
    case["tools"][0]["function"]["parameters"]["properties"]["deep"] = schema
    case["expected"]["arguments"]["deep"] = value
    (loaded,) = parse_suite(json.dumps(case).encode(), "s.jsonl").cases
    assert loaded.expected_arguments["deep"] == value


@pytest.mark.parametrize("ref", ["https://schemas.example/money.json", "#/$defs/missing"])
def test_a_ref_that_does_not_point_into_the_tool_schema_is_refused(ref: str) -> None:
    """A $ref to another document or to nothing names the tool's parameters."""
    case = _case()
    case["tools"][0]["function"]["parameters"]["properties"]["amount"] = {"$ref": ref}
    assert _problems([json.dumps(case)]) == [
        f"s.jsonl:1: tools[0].parameters: $ref '{ref}' does not point into the tool's schema"
    ]


def test_a_ref_within_the_tool_schema_is_followed() -> None:
    """A local $ref resolves, and the expected arguments are checked through it."""
    case = _case()
    parameters = case["tools"][0]["function"]["parameters"]
    parameters["$defs"] = {"money": {"type": "number"}}
    parameters["properties"]["amount"] = {"$ref": "#/$defs/money"}
    assert len(parse_suite(json.dumps(case).encode(), "s.jsonl")) == 1
    case["expected"]["arguments"]["amount"] = "20"
    (problem,) = _problems([json.dumps(case)])
    assert problem.startswith("s.jsonl:1: expected.arguments.amount: violates the schema")


def test_nan_and_infinity_are_not_json_numbers() -> None:
    """Python's json reads NaN and Infinity; a suite that holds them is refused."""
    line = json.dumps(_case()).replace('"amount": 20}}', '"amount": NaN}}')
    assert "NaN" in line
    assert _problems([line]) == ["s.jsonl:1: not valid JSON: NaN is not a JSON number"]


def test_a_suite_larger_than_the_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size is checked first: a model file given as the suite by mistake costs a stat."""
    from rolloutd.evaluation import suite

    path = tmp_path / "big.jsonl"
    path.write_bytes(EXAMPLE.read_bytes())
    size = path.stat().st_size
    monkeypatch.setattr(suite, "MAX_SUITE_BYTES", size - 1)
    with pytest.raises(BadInput) as refused:
        load_suite(path)
    assert f"is {size} bytes; a suite may be at most {size - 1} bytes" in str(refused.value)
    monkeypatch.setattr(suite, "MAX_SUITE_BYTES", size)
    assert len(load_suite(path).cases) == 300


def test_a_suite_read_from_a_device_stops_at_the_limit() -> None:
    """/dev/zero has no size to stat and never ends: it is read to one byte past the limit."""
    with pytest.raises(BadInput) as refused:
        load_suite("/dev/zero")
    assert "/dev/zero: holds more than 67108864 bytes" in str(refused.value)


def _reference(case_id: str = "r-1", **changes: Any) -> dict[str, Any]:
    case: dict[str, Any] = {
        "id": case_id,
        "messages": [{"role": "user", "content": "How long do I have to return boots?"}],
        "context": ["Unworn footwear may be returned within 60 days."],
        "reference": "60 days, if unworn.",
    }
    case.update(changes)
    return case


def test_a_reference_case_is_read_with_its_context_and_answers() -> None:
    """A reference given as one string or a list; context kept in order; no tools needed."""
    suite = parse_suite(
        "\n".join(
            [json.dumps(_reference()), json.dumps(_reference("r-2", reference=["a", "b"]))]
        ).encode(),
        "rag.jsonl",
    )
    assert suite.is_reference
    first, second = suite.cases
    assert first.reference == ("60 days, if unworn.",) and first.context[0].startswith("Unworn")
    assert second.reference == ("a", "b") and second.tools == ()


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"reference": ""}, "s.jsonl:1: reference[0]: expected a non-empty string"),
        ({"reference": []}, "s.jsonl:1: reference: expected a non-empty string or a list"),
        ({"reference": 60}, "s.jsonl:1: reference: expected a non-empty string or a list"),
        ({"context": "one chunk"}, "s.jsonl:1: context: expected a list of strings"),
        ({"context": ["ok", 3]}, "s.jsonl:1: context[1]: expected a non-empty string"),
        ({"expected": {"name": "x", "arguments": {}}}, "s.jsonl:1: expected: a reference case"),
        ({"tools": []}, "s.jsonl:1: tools: a reference case has no tools"),
        ({"messages": []}, "s.jsonl:1: messages: required"),
    ],
)
def test_a_bad_reference_case_is_refused_naming_line_and_field(
    changes: dict[str, Any], problem: str
) -> None:
    """Each malformed reference case is refused with the file, line and field."""
    problems = _problems([json.dumps(_reference(**changes))])
    assert any(p.startswith(problem) for p in problems), problems


def test_a_suite_mixing_calls_and_references_is_refused() -> None:
    """A call case after a reference case names its line and the first case's."""
    problems = _problems([json.dumps(_reference()), json.dumps(_case("c-2"))])
    assert problems == [
        "s.jsonl:2: expected: line 1 is a reference case: a suite is all call cases "
        "('expected') or all reference cases ('reference')"
    ]


def test_the_rag_example_suite_loads(tmp_path: Path) -> None:
    """The committed RAG suite: 26 reference cases, each with context and a unique id."""
    suite = load_suite(EXAMPLE.parent / "support-rag-26.jsonl")
    assert suite.is_reference and len(suite) == 26
    assert all(case.context and case.reference for case in suite.cases)
