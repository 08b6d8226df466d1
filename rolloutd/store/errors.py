"""Errors that only the store raises, each saying what the caller should do next."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from rolloutd.errors import TemporaryError

StoreError = SQLAlchemyError
"""Any failure the database driver raises that the store did not turn into a rolloutd error:
callers above the store catch this name, never the driver's."""


class StaleWrite(TemporaryError):
    """Someone else wrote the rollout since we read it: reload it and decide again."""

    def __init__(self, rollout_id: int, expected_revision: int) -> None:
        super().__init__(
            f"rollout {rollout_id} changed since revision {expected_revision} was read;"
            " reload it and try again",
            delay=0.0,
        )
        self.rollout_id = rollout_id
        self.expected_revision = expected_revision
