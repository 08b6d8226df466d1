"""The error hierarchy: each class says what the caller should do about it.

Retry later (:class:`TemporaryError`), give up (:class:`PermanentError`), tell the
user their input is wrong (:class:`BadInput`, which carries file and field), or
refuse an operation that makes no sense in the current state (:class:`Refused`).
The CLI turns each into an exit code at one boundary (see ``rolloutd.cli.errors``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class RolloutdError(Exception):
    """Base of every error rolloutd raises on purpose."""


class TemporaryError(RolloutdError):
    """Something outside us failed in a way that may pass: retry after ``delay`` seconds, or
    with the caller's backoff when ``delay`` is None."""

    def __init__(self, message: str, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(RolloutdError):
    """Retrying will not help; the operation is given up and reported."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where it is and what was expected."""

    source: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return f"{where}: {self.message}"


class BadInput(RolloutdError):
    """The user's input (a file, an argument) is wrong; nothing was changed."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def one(cls, source: str, field: str, message: str) -> BadInput:
        """Build the error for a single problem."""
        return cls([Problem(source, field, message)])


class Refused(RolloutdError):
    """The operation makes no sense in the current state; nothing was changed."""


class NotFound(RolloutdError):
    """The named object (rollout, artefact set) does not exist."""


class DatabaseUnavailable(TemporaryError):
    """The database could not be reached. The message names the host, never the password."""


class SchemaOutOfDate(PermanentError):
    """The database schema is not at the revision this version of rolloutd expects."""
