"""Least-privilege Postgres roles: who may read, who may ask, who may change a rollout.

Three roles, named ``PREFIX_viewer``, ``PREFIX_operator`` and ``PREFIX_daemon``:

viewer
    SELECT on every rolloutd table (status, list, history, the web view and reports read all
    of them, the schema revision included), nothing else.
operator
    A member of viewer, plus INSERT where ``rolloutctl`` writes: ``commands`` (promote, abort,
    pause, resume), ``events`` (the audit line of a command or a start), ``rollouts`` (start
    inserts a pending row), ``artefact_sets`` (pin), ``drills`` and ``deploy_records`` (drill)
    and ``alert_outbox`` (the alerts of a drill and of an overridden start); USAGE on those
    tables' id sequences; and UPDATE of four columns of ``drills`` (a drill is written as
    running and finished afterwards). Never UPDATE on rollouts, actions or leases, never
    DELETE anywhere: the leader applies the commands.
daemon
    Owns every table and sequence, so it runs the migrations and the leader.

:func:`converge_roles` brings the database to that (creating, granting, revoking, taking
ownership) and is safe to run again; :func:`check_roles` reports what differs. Roles are
cluster-wide; the grants are of the current database. Postgres only: SQLite has no roles.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from rolloutd.errors import BadInput, PermanentError
from rolloutd.store.models import Base

Kind = Literal["viewer", "operator", "daemon"]
KINDS: Final[tuple[Kind, ...]] = ("viewer", "operator", "daemon")
DEFAULT_PREFIX: Final = "rolloutd"
VERSION_TABLE: Final = "alembic_version"
TRIGGER_FUNCTION: Final = "rolloutd_commands_db_role"

TABLE_PRIVILEGES: Final = (
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "TRUNCATE",
    "REFERENCES",
    "TRIGGER",
)
COLUMN_PRIVILEGES: Final = ("INSERT", "UPDATE")

OPERATOR_INSERTS: Final[Mapping[str, str]] = {
    "commands": "promote, abort, pause, resume: a command row the leader applies",
    "events": "the audit line of a submitted command, a start and its overrides",
    "rollouts": "start inserts a pending rollout; the leader starts it",
    "artefact_sets": "rolloutctl artefact pin",
    "drills": "rolloutctl drill records the drill as running",
    "deploy_records": "rolloutctl drill keeps what each deploy did",
    "alert_outbox": "the alerts of a drill and of a start with --skip-drill or --force",
    "suite_runs": "rolloutctl eval stores the runs it made",
    "suite_case_results": "... with each case's result",
    "suite_field_results": "... and each field's",
    "judge_scores": "rolloutctl eval keeps the judge's scores, as the daemon does",
}
"""The tables the operator role may INSERT into, and why."""

OPERATOR_COLUMN_UPDATES: Final[Mapping[str, tuple[str, ...]]] = {
    "drills": ("result", "finished_at", "reason", "detail"),
}
"""Columns the operator may UPDATE: a drill's outcome, written when it finishes."""

DANGEROUS: Final = frozenset({"rollouts", "actions", "leases", "events", "commands"})
"""Tables where a write outside the leader changes or erases what happened."""

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,40}")


@dataclass(frozen=True)
class RoleNames:
    """The names of the three roles under one prefix."""

    prefix: str

    @classmethod
    def of(cls, prefix: str) -> RoleNames:
        """The roles under ``prefix``.

        :raises BadInput: unless the prefix is lower-case letters, digits and underscores,
            starting with a letter or an underscore, at most 41 characters.
        """
        if not _PREFIX.fullmatch(prefix):
            raise BadInput.one(
                "command line",
                "--prefix",
                f"{prefix[:60]!r} is not a role prefix: lower-case letters, digits and _,"
                " starting with a letter or _, at most 41 characters",
            )
        return cls(prefix)

    def name(self, kind: Kind) -> str:
        """The role of ``kind``, e.g. ``rolloutd_operator``."""
        return f"{self.prefix}_{kind}"

    def all(self) -> dict[Kind, str]:
        """Every role by kind."""
        return {kind: self.name(kind) for kind in KINDS}


@dataclass(frozen=True)
class Change:
    """One thing :func:`converge_roles` did, or found done already (``done=False``)."""

    role: str
    action: str  # "create role", "grant", "revoke", "owner", "member of"
    what: str
    done: bool

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {"role": self.role, "action": self.action, "what": self.what, "done": self.done}


@dataclass(frozen=True)
class Finding:
    """One way a role differs from what it should be."""

    role: str
    problem: Literal["no such role", "missing", "extra", "not owner", "not a member"]
    what: str
    dangerous: bool = False

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "role": self.role,
            "problem": self.problem,
            "what": self.what,
            "dangerous": self.dangerous,
        }

    def __str__(self) -> str:
        mark = " (dangerous)" if self.dangerous else ""
        return f"{self.role}: {self.problem}: {self.what}{mark}"


def rolloutd_tables() -> list[str]:
    """Every table of the schema, the migrations' version table included."""
    return sorted([*Base.metadata.tables, VERSION_TABLE])


def expected_table_privileges(kind: Kind, tables: Iterable[str]) -> dict[str, frozenset[str]]:
    """The table-level privileges a role of ``kind`` should hold, by table (the daemon: all,
    as the owner)."""
    if kind == "daemon":
        return {table: frozenset(TABLE_PRIVILEGES) for table in tables}
    found: dict[str, frozenset[str]] = {}
    for table in tables:
        granted = {"SELECT"}
        if kind == "operator" and table in OPERATOR_INSERTS:
            granted.add("INSERT")
        found[table] = frozenset(granted)
    return found


def expected_column_updates(kind: Kind) -> Mapping[str, tuple[str, ...]]:
    """Columns a role of ``kind`` may UPDATE without UPDATE on the whole table."""
    return OPERATOR_COLUMN_UPDATES if kind == "operator" else {}


def require_postgres(backend: str) -> None:
    """:raises BadInput: unless ``backend`` (a dialect name) is Postgres: SQLite has no
    roles."""
    if backend != "postgresql":
        raise BadInput.one(
            "ROLLOUTD_DATABASE_URL",
            "",
            "roles need Postgres: SQLite has no roles, whoever can write the file can do"
            " anything (point it at postgresql://...)",
        )


def current_role(session: Session) -> str | None:
    """The database role this session acts as (``current_user``); None on SQLite."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    role: str | None = session.scalar(text("SELECT current_user"))
    return role


def check_roles(connection: Connection, names: RoleNames) -> list[Finding]:
    """Every way the three roles differ from what they should be: a role that does not exist,
    a missing grant, an extra one (dangerous when it can rewrite history), a table the daemon
    does not own, an operator that is not a member of viewer.

    :raises BadInput: on SQLite.
    """
    require_postgres(connection.dialect.name)
    tables = rolloutd_tables()
    roles = names.all()
    present = _existing_roles(connection, roles.values())
    findings = [
        Finding(role, "no such role", "create it") for role in roles.values() if role not in present
    ]
    for kind, role in roles.items():
        if role not in present:
            continue
        if kind == "daemon":
            findings += _ownership_findings(connection, role, tables)
            continue
        findings += _table_findings(connection, kind, role, tables)
        findings += _sequence_findings(connection, kind, role, tables)
        viewer = roles["viewer"]
        if kind == "operator" and viewer in present and not _is_member(connection, role, viewer):
            findings.append(Finding(role, "not a member", roles["viewer"]))
    return findings


def converge_roles(
    connection: Connection, names: RoleNames, *, login: bool = False
) -> list[Change]:
    """Create the three roles and bring their privileges to exactly the expected ones, in the
    caller's transaction; what is right already is reported as not done.

    ``login``: the roles may log in (a password is set apart, e.g. psql's ``\\password``).

    :raises BadInput: on SQLite.
    :raises PermanentError: when the connected role may not create roles or grant (naming
        the statement that failed, never a password: none is ever sent).
    """
    require_postgres(connection.dialect.name)
    tables = rolloutd_tables()
    roles = names.all()
    changes: list[Change] = []
    present = _existing_roles(connection, roles.values())
    quote = connection.dialect.identifier_preparer.quote
    database = quote(connection.scalar(text("SELECT current_database()")) or "")
    for kind, role in roles.items():
        q = quote(role)
        attribute = "LOGIN" if login else "NOLOGIN"
        if role in present:
            can_login = connection.scalar(
                text("SELECT rolcanlogin FROM pg_roles WHERE rolname = :r"), {"r": role}
            )
            if login and not can_login:
                _run(connection, f"ALTER ROLE {q} LOGIN")
                changes.append(Change(role, "alter role", "LOGIN", True))
            else:
                changes.append(Change(role, "create role", role, False))
        else:
            _run(connection, f"CREATE ROLE {q} {attribute}")
            changes.append(Change(role, "create role", f"{role} {attribute}", True))
        has_connect = connection.scalar(
            text("SELECT has_database_privilege(:r, current_database(), 'CONNECT')"), {"r": role}
        )
        if not has_connect:
            _run(connection, f"GRANT CONNECT ON DATABASE {database} TO {q}")
        changes.append(Change(role, "grant", "CONNECT on the database", not has_connect))
        schema_privileges = "USAGE, CREATE" if kind == "daemon" else "USAGE"
        _run(connection, f"GRANT {schema_privileges} ON SCHEMA public TO {q}")
    member = _is_member(connection, roles["operator"], roles["viewer"])
    if not member:
        # First: the operator's SELECTs then come from viewer, not from grants of its own.
        _run(connection, f"GRANT {quote(roles['viewer'])} TO {quote(roles['operator'])}")
    changes.append(Change(roles["operator"], "member of", roles["viewer"], not member))
    changes += _converge_daemon(connection, roles["daemon"], tables)
    changes += _converge_grants(connection, "viewer", roles["viewer"], tables)
    changes += _converge_grants(connection, "operator", roles["operator"], tables)
    # Tables a later migration creates are readable at once; the next run grants the rest.
    _run(
        connection,
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {quote(roles['daemon'])} IN SCHEMA public"
        f" GRANT SELECT ON TABLES TO {quote(roles['viewer'])}",
    )
    return changes


def _converge_daemon(connection: Connection, role: str, tables: list[str]) -> list[Change]:
    quote = connection.dialect.identifier_preparer.quote
    changes = []
    owners: dict[str, str] = dict(
        connection.execute(
            text("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'public'")
        ).all()
    )
    for table in tables:
        owner = owners.get(table)
        if owner is None:
            raise PermanentError(f"no table {table}: run rolloutd db upgrade first")
        if owner != role:
            # The table's owned sequences follow it.
            _run(connection, f"ALTER TABLE {quote(table)} OWNER TO {quote(role)}")
        changes.append(Change(role, "owner", table, owner != role))
    function_owner = connection.scalar(
        text(
            "SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = :f"
            " AND pronamespace = 'public'::regnamespace"
        ),
        {"f": TRIGGER_FUNCTION},
    )
    if function_owner is not None:
        if function_owner != role:
            _run(connection, f"ALTER FUNCTION {TRIGGER_FUNCTION}() OWNER TO {quote(role)}")
        changes.append(
            Change(role, "owner", f"function {TRIGGER_FUNCTION}()", function_owner != role)
        )
    return changes


def _converge_grants(
    connection: Connection, kind: Kind, role: str, tables: list[str]
) -> list[Change]:
    quote = connection.dialect.identifier_preparer.quote
    q = quote(role)
    changes = []
    held = _table_privileges(connection, role, tables)
    for table, wanted in expected_table_privileges(kind, tables).items():
        have = held.get(table, frozenset())
        missing, extra = sorted(wanted - have), sorted(have - wanted)
        if missing:
            _run(connection, f"GRANT {', '.join(missing)} ON {quote(table)} TO {q}")
        if extra:
            _run(connection, f"REVOKE {', '.join(extra)} ON {quote(table)} FROM {q}")
        for privilege in sorted(wanted):
            changes.append(Change(role, "grant", f"{privilege} on {table}", privilege in missing))
        changes += [Change(role, "revoke", f"{p} on {table}", True) for p in extra]
    columns = _column_privileges(connection, role, tables)
    wanted_columns = {
        (privilege, table, column)
        for table, names in expected_column_updates(kind).items()
        for privilege in ("UPDATE",)
        for column in names
    }
    for privilege, table, column in sorted(wanted_columns - columns):
        _run(connection, f"GRANT {privilege} ({quote(column)}) ON {quote(table)} TO {q}")
    for privilege, table, column in sorted(columns - wanted_columns):
        _run(connection, f"REVOKE {privilege} ({quote(column)}) ON {quote(table)} FROM {q}")
        changes.append(Change(role, "revoke", f"{privilege} ({column}) on {table}", True))
    for privilege, table, column in sorted(wanted_columns):
        done = (privilege, table, column) not in columns
        changes.append(Change(role, "grant", f"{privilege} ({column}) on {table}", done))
    sequences = _sequences(connection, tables)
    for table, sequence in sorted(sequences.items()):
        wanted_usage = kind == "operator" and table in OPERATOR_INSERTS
        have = _sequence_privileges(connection, role, sequence)
        if wanted_usage and "USAGE" not in have:
            _run(connection, f"GRANT USAGE ON SEQUENCE {sequence} TO {q}")
        extra = sorted(have - ({"USAGE"} if wanted_usage else set()))
        if extra:
            _run(connection, f"REVOKE {', '.join(extra)} ON SEQUENCE {sequence} FROM {q}")
            changes += [Change(role, "revoke", f"{p} on sequence {sequence}", True) for p in extra]
        if wanted_usage:
            changes.append(
                Change(role, "grant", f"USAGE on sequence {sequence}", "USAGE" not in have)
            )
    return changes


def _table_findings(
    connection: Connection, kind: Kind, role: str, tables: list[str]
) -> list[Finding]:
    findings = []
    held = _table_privileges(connection, role, tables)
    for table, wanted in expected_table_privileges(kind, tables).items():
        have = held.get(table, frozenset())
        findings += [Finding(role, "missing", f"{p} on {table}") for p in sorted(wanted - have)]
        findings += [
            Finding(
                role, "extra", f"{p} on {table}", dangerous=p != "SELECT" and table in DANGEROUS
            )
            for p in sorted(have - wanted)
        ]
    columns = _column_privileges(connection, role, tables)
    wanted_columns = {
        ("UPDATE", table, column)
        for table, names in expected_column_updates(kind).items()
        for column in names
    }
    findings += [
        Finding(role, "missing", f"{p} ({c}) on {t}")
        for p, t, c in sorted(wanted_columns - columns)
    ]
    findings += [
        Finding(role, "extra", f"{p} ({c}) on {t}", dangerous=t in DANGEROUS)
        for p, t, c in sorted(columns - wanted_columns)
    ]
    return findings


def _sequence_findings(
    connection: Connection, kind: Kind, role: str, tables: list[str]
) -> list[Finding]:
    findings = []
    for table, sequence in sorted(_sequences(connection, tables).items()):
        wanted = {"USAGE"} if kind == "operator" and table in OPERATOR_INSERTS else set()
        have = _sequence_privileges(connection, role, sequence)
        findings += [
            Finding(role, "missing", f"{p} on sequence {sequence}") for p in sorted(wanted - have)
        ]
        findings += [
            Finding(role, "extra", f"{p} on sequence {sequence}") for p in sorted(have - wanted)
        ]
    return findings


def _ownership_findings(connection: Connection, role: str, tables: list[str]) -> list[Finding]:
    owners: dict[str, str] = dict(
        connection.execute(
            text("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'public'")
        ).all()
    )
    return [
        Finding(role, "not owner", f"{table} (owned by {owners.get(table) or 'nobody: no table'})")
        for table in tables
        if owners.get(table) != role
    ]


def _existing_roles(connection: Connection, roles: Iterable[str]) -> set[str]:
    query = text("SELECT rolname FROM pg_roles WHERE rolname IN :names").bindparams(
        bindparam("names", expanding=True)
    )
    return set(connection.scalars(query, {"names": list(roles)}))


def _is_member(connection: Connection, role: str, of: str) -> bool:
    return bool(
        connection.scalar(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_auth_members m"
                " JOIN pg_roles r ON r.oid = m.member JOIN pg_roles g ON g.oid = m.roleid"
                " WHERE r.rolname = :role AND g.rolname = :of)"
            ),
            {"role": role, "of": of},
        )
    )


def _table_privileges(
    connection: Connection, role: str, tables: list[str]
) -> dict[str, frozenset[str]]:
    """What ``role`` may do to each table, through its own grants, its memberships and PUBLIC."""
    rows = connection.execute(
        text(
            "SELECT t.name, p.privilege FROM unnest(CAST(:tables AS text[])) AS t(name)"
            " CROSS JOIN unnest(CAST(:privileges AS text[])) AS p(privilege)"
            " WHERE to_regclass(quote_ident(t.name)) IS NOT NULL"
            " AND has_table_privilege(:role, to_regclass(quote_ident(t.name)), p.privilege)"
        ),
        {"tables": tables, "privileges": list(TABLE_PRIVILEGES), "role": role},
    )
    found: dict[str, set[str]] = {}
    for table, privilege in rows:
        found.setdefault(table, set()).add(privilege)
    return {table: frozenset(privileges) for table, privileges in found.items()}


def _column_privileges(
    connection: Connection, role: str, tables: list[str]
) -> set[tuple[str, str, str]]:
    """(privilege, table, column) that ``role`` holds on single columns only."""
    rows = connection.execute(
        text(
            "SELECT p.privilege, c.relname, a.attname FROM pg_class c"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " CROSS JOIN unnest(CAST(:privileges AS text[])) AS p(privilege)"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
            " AND c.relname = ANY(CAST(:tables AS text[]))"
            " AND NOT has_table_privilege(:role, c.oid, p.privilege)"
            " AND has_column_privilege(:role, c.oid, a.attnum, p.privilege)"
        ),
        {"tables": tables, "privileges": list(COLUMN_PRIVILEGES), "role": role},
    )
    return {(privilege, table, column) for privilege, table, column in rows}


def _sequences(connection: Connection, tables: list[str]) -> dict[str, str]:
    """The id sequence of each table that has one."""
    rows = connection.execute(
        text(
            "SELECT t.name, pg_get_serial_sequence(quote_ident(t.name), 'id')"
            " FROM unnest(CAST(:tables AS text[])) AS t(name)"
            " JOIN information_schema.columns c ON c.table_schema = 'public'"
            " AND c.table_name = t.name AND c.column_name = 'id'"
        ),
        {"tables": tables},
    )
    return {table: sequence for table, sequence in rows if sequence}


def _sequence_privileges(connection: Connection, role: str, sequence: str) -> frozenset[str]:
    rows = connection.execute(
        text(
            "SELECT p FROM unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) AS p"
            " WHERE has_sequence_privilege(:role, :sequence, p)"
        ),
        {"role": role, "sequence": sequence},
    )
    return frozenset(rows.scalars())


def _run(connection: Connection, statement: str) -> None:
    """Run one DDL statement built from quoted identifiers (no values: no password)."""
    try:
        connection.exec_driver_sql(statement)
    except DBAPIError as exc:
        reason = (
            str(exc.orig).strip().splitlines()[0]
            if str(exc.orig).strip()
            else type(exc.orig).__name__
        )
        raise PermanentError(f"{statement}: {reason}") from None
