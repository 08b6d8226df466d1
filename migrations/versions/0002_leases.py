"""Leader lease with a fencing epoch.

Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations import ddl

revision: str = "0002"
down_revision: str | None = "0001"


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        ddl.timestamp("expires_at"),
        ddl.timestamp("renewed_at"),
        ddl.primary_key("leases", "name"),
    )


def downgrade() -> None:
    op.drop_table("leases")
