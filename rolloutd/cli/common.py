"""What every ``rolloutctl`` command shares: the ``--output`` option, the operator's name, a
session on the configured database, and printing a result as a table or as JSON."""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

OUTPUT = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Human-readable table, or JSON for scripts.",
)


def operator_name() -> str:
    """Who is acting: the user behind sudo if any, else the OS user."""
    return os.environ.get("SUDO_USER") or getpass.getuser()


@contextmanager
def database() -> Iterator[Session]:
    """A session in one transaction on the configured database, whose schema must be at head."""
    from rolloutd.settings import load_settings
    from rolloutd.store.db import check_revision, make_engine, session_factory, transaction

    settings = load_settings()
    engine = make_engine(settings.database_url.get_secret_value())
    try:
        check_revision(engine)
        with transaction(session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


def emit(data: Any, output: str, human: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON, or through ``human`` as a table."""
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human(data)
