"""Every command row keeps the database role that inserted it, filled by the database.

``actor`` is what ``rolloutctl`` claims (``SUDO_USER`` or the OS user): anyone can set it.
``db_role`` is ``current_user`` of the inserting session. On Postgres a column default says
so and a trigger enforces it, so a client that names the column, or UPDATEs it later, still
cannot choose its value; an UPDATE keeps the old one. Rows from before stay NULL (unknown), as
every row does on SQLite, which has no roles.

Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"

_FUNCTION = "rolloutd_commands_db_role"
_TRIGGER = "trg_commands_db_role"

_CREATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        NEW.db_role := OLD.db_role;
    ELSE
        NEW.db_role := current_user;
    END IF;
    RETURN NEW;
END
$$
"""

_CREATE_TRIGGER = (
    f"CREATE TRIGGER {_TRIGGER} BEFORE INSERT OR UPDATE ON commands"
    f" FOR EACH ROW EXECUTE FUNCTION {_FUNCTION}()"
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("commands") as batch:
        batch.add_column(sa.Column("db_role", sa.String(200), nullable=True))
    if postgres:
        # The default is set after the column exists: added with it, the rows already there
        # would name the role running this migration, which submitted none of them.
        op.execute("ALTER TABLE commands ALTER COLUMN db_role SET DEFAULT current_user")
        op.execute(_CREATE_FUNCTION)
        op.execute(_CREATE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON commands")
        op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}()")
    with op.batch_alter_table("commands") as batch:
        batch.drop_column("db_role")
