"""The lease's epoch becomes a key, so a renewal no longer waits for the leader's own writes.

Every leader write locks the lease row FOR KEY SHARE. Postgres takes a FOR UPDATE lock for
an UPDATE that changes a column of a unique index and FOR NO KEY UPDATE otherwise: with a
unique index on (name, epoch) a takeover, which bumps the epoch, still waits for the writes
in flight, and a renewal, which moves only the expiry, does not.

Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"


def upgrade() -> None:
    op.create_index(op.f("ix_leases_name_epoch"), "leases", ["name", "epoch"], unique=True)


def downgrade() -> None:
    op.drop_index(op.f("ix_leases_name_epoch"), table_name="leases")
