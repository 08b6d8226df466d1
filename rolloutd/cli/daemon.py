"""The ``rolloutd`` command: the long-running service and its database chores.

\b
rolloutd db upgrade   bring the schema to the revision this version needs
rolloutd db compact   compact the evaluations of rollouts that ended long ago
rolloutd db roles     create the viewer, operator and daemon roles (Postgres), or --check them
rolloutd run          lead (or stand by) and drive every active rollout
"""

from __future__ import annotations

import json
import sys

import click

from rolloutd.cli.common import OUTPUT
from rolloutd.cli.errors import run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="rolloutd", prog_name="rolloutd")
def cli() -> None:
    """rolloutd: the progressive-rollout controller for LLM inference engines.

    \b
    Settings come from ROLLOUTD_* environment variables and /etc/rolloutd/rolloutd.env
    (or the file in ROLLOUTD_ENV_FILE). The database defaults to sqlite:///rolloutd.db.

    \b
    Examples:
      ROLLOUTD_DATABASE_URL=postgresql://rolloutd@db.internal/rolloutd rolloutd db upgrade
      rolloutd run
    """


@cli.group()
def db() -> None:
    """Database schema chores."""


@db.command()
def upgrade() -> None:
    """Apply the migrations up to the newest revision (safe to run again).

    \b
    Example:
      ROLLOUTD_DATABASE_URL=postgresql://rolloutd@db.internal/rolloutd rolloutd db upgrade
    """
    from rolloutd.settings import load_settings
    from rolloutd.store.db import describe
    from rolloutd.store.db import upgrade as upgrade_schema
    from rolloutd.store.schema import SCHEMA_REVISION

    url = load_settings().database_url.get_secret_value()
    upgrade_schema(url)
    click.echo(f"{describe(url)}: at revision {SCHEMA_REVISION}")


@db.command()
@click.option(
    "--retention",
    metavar="DURATION",
    help="Compact rollouts that ended longer ago than this (default: ROLLOUTD_RETENTION, 90d).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@OUTPUT
def compact(retention: str | None, dry_run: bool, output: str) -> None:
    """Compact the gate evaluations of rollouts that ended before the retention period to the
    decisive ones (every verdict change, the verdicts at each rollback, pause and promotion,
    the newest of each gate and step) plus one per gate per hour. Events are never touched.
    The leader does this daily by itself; safe to run at any time, and again.

    \b
    Examples:
      rolloutd db compact --dry-run
      rolloutd db compact --retention 30d --output json
    """
    from rolloutd.clock import utc_now
    from rolloutd.core.durations import parse_duration
    from rolloutd.errors import BadInput
    from rolloutd.settings import load_settings
    from rolloutd.store.db import check_revision, make_engine, session_factory, transaction
    from rolloutd.store.retention import Compaction, compact_ended

    settings = load_settings()
    keep = settings.retention
    if retention is not None:
        try:
            keep = parse_duration(retention)
        except ValueError as exc:
            raise BadInput.one("command line", "--retention", str(exc)) from None
    engine = make_engine(settings.database_url.get_secret_value())

    def report(done: Compaction) -> None:
        verb = "would delete" if dry_run else "deleted"
        click.echo(
            f"rollout {done.rollout_id}: {verb} {done.deleted}, kept {done.kept} evaluations",
            err=output == "json",
        )

    try:
        check_revision(engine)
        cutoff = utc_now() - keep
        sessions = session_factory(engine)
        done = compact_ended(
            lambda: transaction(sessions), cutoff, dry_run=dry_run, progress=report
        )
    finally:
        engine.dispose()
    summary = {
        "cutoff": cutoff.isoformat(),
        "dry_run": dry_run,
        "rollouts": len(done),
        "deleted": sum(c.deleted for c in done),
        "kept": sum(c.kept for c in done),
    }
    if output == "json":
        click.echo(json.dumps(summary, indent=2))
    else:
        verb = "would delete" if dry_run else "deleted"
        click.echo(
            f"{summary['rollouts']} rollouts that ended before {summary['cutoff']} had "
            f"evaluations to compact: {verb} {summary['deleted']}, kept {summary['kept']}"
        )


@db.command()
@click.option(
    "--prefix",
    default="rolloutd",
    show_default=True,
    envvar="ROLLOUTD_ROLE_PREFIX",
    help="Roles are PREFIX_viewer, PREFIX_operator and PREFIX_daemon (env ROLLOUTD_ROLE_PREFIX).",
)
@click.option("--check", is_flag=True, help="Change nothing; exit 1 unless every role is right.")
@click.option(
    "--login",
    is_flag=True,
    help="Let the roles log in (set their passwords apart, e.g. with psql's \\password).",
)
@OUTPUT
def roles(prefix: str, check: bool, login: bool, output: str) -> None:
    """Create least-privilege Postgres roles and grant them exactly what they need, or --check.

    \b
    PREFIX_viewer    SELECT on every rolloutd table: status, list, history, web view, reports
    PREFIX_operator  viewer, plus INSERT on commands, events, rollouts (start), artefact_sets
                     (pin), drills, deploy_records, alert_outbox and their id sequences, and
                     UPDATE of drills(result, finished_at, reason, detail); never UPDATE on
                     rollouts, actions or leases, never DELETE
    PREFIX_daemon    owns every table and sequence: runs migrations and the leader

    Safe to run again: what is right is left alone, an extra grant is revoked. Run it as
    a superuser (or the database owner with CREATEROLE) after `rolloutd db upgrade`, and
    again after each upgrade. Exit 1 when a role is still not right (--check: when any is).
    Postgres only. No password is ever read or printed: with --login, set them with
    ALTER ROLE ... PASSWORD in psql (\\password), or use peer or certificate authentication.

    \b
    Examples:
      ROLLOUTD_DATABASE_URL=postgresql://postgres@db.internal/rolloutd rolloutd db roles
      rolloutd db roles --login --prefix atlas
      rolloutd db roles --check --output json
    """
    from rolloutd.settings import load_settings
    from rolloutd.store.db import check_revision, describe, make_engine, translate_connect_errors
    from rolloutd.store.roles import RoleNames, check_roles, converge_roles, require_postgres

    names = RoleNames.of(prefix)
    url = load_settings().database_url.get_secret_value()
    engine = make_engine(url)
    try:
        require_postgres(engine.dialect.name)
        check_revision(engine)
        with translate_connect_errors(engine.url), engine.begin() as connection:
            changes = [] if check else converge_roles(connection, names, login=login)
            problems = check_roles(connection, names)
    finally:
        engine.dispose()
    done = [c for c in changes if c.done]
    data = {
        "database": describe(url),
        "roles": names.all(),
        "check": check,
        "changed": [c.as_dict() for c in done],
        "already": len(changes) - len(done),
        "problems": [p.as_dict() for p in problems],
        "ok": not problems,
    }
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        for change in done:
            click.echo(f"{change.role}: {change.action} {change.what}")
        if not check:
            click.echo(f"{len(done)} changed, {data['already']} already in place")
        for problem in problems:
            click.echo(f"not right: {problem}", err=True)
        if not problems:
            click.echo(f"roles {', '.join(names.all().values())}: as expected on {describe(url)}")
    if problems:
        sys.exit(1)


@cli.command()
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    help="Serve /healthz on this local port (default: ROLLOUTD_HEALTH_PORT, 9467; 0: any).",
)
def run(health_port: int | None) -> None:
    """Lead, or stand by, and drive every active rollout until SIGTERM.

    Any number of instances may point at one Postgres: one leads (a lease with a fencing
    epoch), the others take over within the lease TTL when it dies. With SQLite, one
    instance. Under systemd (Type=notify) it sends READY=1, STATUS=, WATCHDOG=1 and
    STOPPING=1; SIGHUP reloads the log level, the lease TTL and the webhook URLs.

    \b
    Example:
      ROLLOUTD_DATABASE_URL=postgresql://rolloutd@db.internal/rolloutd rolloutd run
    """
    from rolloutd.daemon.service import Daemon
    from rolloutd.logs import configure_logging
    from rolloutd.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_level)
    daemon = Daemon(settings, health_port=health_port)
    daemon.install_signal_handlers()
    sys.exit(daemon.run())


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``rolloutd`` console script."""
    sys.exit(run_cli(cli, "rolloutd", argv))
