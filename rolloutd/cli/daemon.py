"""The ``rolloutd`` command: the long-running service and its database chores.

\b
rolloutd db upgrade   bring the schema to the revision this version needs
rolloutd run          lead (or stand by) and drive every active rollout
"""

from __future__ import annotations

import sys

import click

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
