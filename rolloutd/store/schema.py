"""The schema revision this code was written against, importable without alembic.

``check_revision`` compares the database with this constant at start-up, so the CLI can refuse
to run on an old schema without paying for an alembic import. A test keeps it equal to the head
of ``migrations/versions``: add a migration, bump this constant.
"""

from __future__ import annotations

from typing import Final

SCHEMA_REVISION: Final = "0013"
