"""How a suite case, and each field of its tool call, can come out: the vocabulary the scorer
uses and the store's check constraints allow, for call cases and reference cases."""

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
ReferenceOutcome = Literal["scored", "judge_error", "request_error"]
"""A reference case: scored, answered but not scored by the judge, or never answered."""
FIELD_OUTCOMES: tuple[FieldOutcome, ...] = get_args(FieldOutcome)
CASE_OUTCOMES: tuple[CaseOutcome, ...] = get_args(CaseOutcome)
REFERENCE_OUTCOMES: tuple[ReferenceOutcome, ...] = get_args(ReferenceOutcome)
STORED_CASE_OUTCOMES: tuple[str, ...] = tuple(dict.fromkeys(CASE_OUTCOMES + REFERENCE_OUTCOMES))
"""Every outcome a stored case may have, a call case's or a reference case's."""
