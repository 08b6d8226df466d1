"""One run of a suite against one endpoint, and the figures read off it.

A :class:`RunSummary` is what the runner produces, what the store keeps and gives back,
and what the gates judge. Rates are over *measured* cases: a request error means the
endpoint never answered, so the case counts for neither build rather than as a wrong
answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from rolloutd.core.suite_outcomes import CASE_OUTCOMES, FIELD_OUTCOMES
from rolloutd.evaluation.compare import CaseResult

RunRole = Literal["canary", "baseline"]


@dataclass(frozen=True)
class FieldTally:
    """How one argument (``tool.argument``) fared over the cases of one run."""

    field: str
    counts: Mapping[str, int]
    schema_violations: int
    strict_correct: int

    @property
    def cases(self) -> int:
        """Cases in which this argument was expected or sent."""
        return sum(self.counts.values())

    @property
    def good(self) -> int:
        """Cases with the right value, in any spelling."""
        return self.counts.get("correct", 0) + self.counts.get("format", 0)

    def as_json(self) -> dict[str, Any]:
        """The tally as JSON-ready data."""
        return {
            "field": self.field,
            "cases": self.cases,
            **{outcome: self.counts.get(outcome, 0) for outcome in FIELD_OUTCOMES},
            "schema_violations": self.schema_violations,
            "strict_correct": self.strict_correct,
        }


@dataclass(frozen=True)
class RunSummary:
    """The cases of one run, in suite order, with where and when they were asked."""

    suite_path: str
    suite_sha256: str
    endpoint: str
    role: RunRole
    cases: tuple[CaseResult, ...]
    started_at: datetime
    finished_at: datetime
    run_id: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> dict[str, CaseResult]:
        """The cases by id."""
        return {case.case_id: case for case in self.cases}

    @cached_property
    def outcomes(self) -> dict[str, int]:
        """How many cases ended in each outcome (every outcome present, zeros included)."""
        counted = Counter(case.outcome for case in self.cases)
        return {outcome: counted.get(outcome, 0) for outcome in CASE_OUTCOMES}

    @property
    def measured(self) -> int:
        """Cases the endpoint answered."""
        return sum(case.measured for case in self.cases)

    @property
    def request_errors(self) -> int:
        """Cases the endpoint never answered usably (after retries)."""
        return self.outcomes["request_error"]

    @property
    def exact(self) -> int:
        """Cases with the right tool and every argument's value right (schema-aware)."""
        return sum(case.exact is True for case in self.cases)

    @property
    def strict_exact(self) -> int:
        """Cases whose arguments equal the expected ones as plain strings."""
        return sum(case.strict is True for case in self.cases)

    @property
    def exactness(self) -> float | None:
        """Schema-aware exactness over the measured cases; None when nothing was measured."""
        return self.exact / self.measured if self.measured else None

    @property
    def strict_exactness(self) -> float | None:
        """The naive score over the measured cases."""
        return self.strict_exact / self.measured if self.measured else None

    @property
    def tool_calls(self) -> int:
        """Cases answered with a call to the expected tool (schema validity is judged on these)."""
        return sum(case.schema_valid is not None for case in self.cases)

    @property
    def schema_violations(self) -> int:
        """Calls whose arguments violate the tool's JSON Schema (or are not a JSON object)."""
        return sum(case.schema_valid is False for case in self.cases)

    @property
    def schema_violation_rate(self) -> float | None:
        """Schema violations per call of the expected tool."""
        return self.schema_violations / self.tool_calls if self.tool_calls else None

    @cached_property
    def fields(self) -> dict[str, FieldTally]:
        """Per-argument tallies by ``tool.argument``, sorted by name."""
        counts: dict[str, Counter[str]] = {}
        invalid: Counter[str] = Counter()
        strict: Counter[str] = Counter()
        for case in self.cases:
            for result in case.fields:
                key = case.field_key(result)
                counts.setdefault(key, Counter())[result.outcome] += 1
                invalid[key] += not result.schema_valid and result.outcome != "missing"
                strict[key] += result.strict_correct
        return {
            key: FieldTally(key, dict(counts[key]), invalid[key], strict[key])
            for key in sorted(counts)
        }

    def headline(self) -> dict[str, Any]:
        """The run's figures without the cases, as JSON-ready data."""
        return {
            "run_id": self.run_id,
            "role": self.role,
            "endpoint": self.endpoint,
            "suite": self.suite_path,
            "suite_sha256": self.suite_sha256,
            "cases": len(self.cases),
            "measured": self.measured,
            "exactness": _round(self.exactness),
            "strict_exactness": _round(self.strict_exactness),
            "schema_violation_rate": _round(self.schema_violation_rate),
            "outcomes": self.outcomes,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
        }

    def as_json(self) -> dict[str, Any]:
        """The headline and the per-field table."""
        return {
            **self.headline(),
            "fields": [tally.as_json() for tally in self.fields.values()],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
