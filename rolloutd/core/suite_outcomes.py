"""How a suite case, and each field of its tool call, can come out: the vocabulary the scorer
uses and the store's check constraints allow."""

from __future__ import annotations

from typing import Literal, get_args

FieldOutcome = Literal["correct", "format", "wrong_value", "missing", "extra"]
CaseOutcome = Literal[
    "correct",
    "format",
    "wrong_value",
    "schema_violation",
    "wrong_tool",
    "no_call",
    "request_error",
]
FIELD_OUTCOMES: tuple[FieldOutcome, ...] = get_args(FieldOutcome)
CASE_OUTCOMES: tuple[CaseOutcome, ...] = get_args(CaseOutcome)
