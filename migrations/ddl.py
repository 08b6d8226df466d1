"""Column and constraint definitions that the migrations share.

The migrations spell out their types instead of importing the models, so that each one keeps
describing its revision after the models move on. These helpers are part of that record: a
revision's schema is what they returned when it was written, so never change one; add another.
Constraint names follow the models' naming convention (``rolloutd.store.models``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def id_column() -> sa.Column[int]:
    """The integer key the database numbers."""
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def rollout_id(*, nullable: bool = False) -> sa.Column[int]:
    """The rollout a row belongs to (with ``foreign_key(table, "rollout_id", "rollouts")``)."""
    return sa.Column("rollout_id", sa.Integer(), nullable=nullable)


def timestamp(name: str, *, nullable: bool = False) -> sa.Column[object]:
    """A timezone-aware time (``timestamptz`` on Postgres)."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def primary_key(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    """The table's primary key: ``id`` unless other ``columns`` are given."""
    return sa.PrimaryKeyConstraint(*(columns or ("id",)), name=f"pk_{table}")


def foreign_key(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    """``column`` of ``table`` refers to the ``id`` of ``target``."""
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=f"fk_{table}_{column}_{target}")


def unique(table: str, *columns: str) -> sa.UniqueConstraint:
    """No two rows of the table share ``columns``."""
    return sa.UniqueConstraint(*columns, name=f"uq_{table}_{'_'.join(columns)}")


def one_of(table: str, column: str, values: tuple[str, ...]) -> sa.CheckConstraint:
    """``column`` holds one of ``values``."""
    allowed = ", ".join(f"'{value}'" for value in values)
    return sa.CheckConstraint(f"{column} IN ({allowed})", name=f"ck_{table}_{column}")


def drop_table(table: str, *indexes: str) -> None:
    """Drop the table's ``indexes``, in the order given, then the table."""
    for index in indexes:
        op.drop_index(index, table_name=table)
    op.drop_table(table)
