"""What every ``rolloutctl`` command shares: the ``--output`` option, the types that check ids
and numbers before anything runs, the operator's name, a session (or, to read, a connection)
on the configured database, and printing a result as a table or as JSON."""

from __future__ import annotations

import getpass
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rolloutd.store.types import Connection, Engine, Session

F = TypeVar("F", bound=Callable[..., Any])


def output_option(
    human: str = "table", help: str = "Human-readable table, or JSON for scripts."
) -> Callable[[F], F]:
    """``--output/-o``: ``human`` (the default) or ``json``."""
    return click.option(
        "--output",
        "-o",
        type=click.Choice([human, "json"]),
        default=human,
        show_default=True,
        help=help,
    )


OUTPUT = output_option()

MAX_ID = 2**31 - 1
"""The largest id a row can have: ids are INTEGER columns, 32 bits on Postgres."""
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")


class RowId(click.ParamType[int]):
    """The id of a row (a rollout): a whole number from 1 to :data:`MAX_ID`.

    A larger one names no row, but would reach the database and fail there (Postgres
    cannot compare it with an INTEGER column, SQLite cannot bind one past 2**63 - 1), so
    it is refused with the argument's name before any query.
    """

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        text = str(value).strip()
        if not _WHOLE_NUMBER.fullmatch(text):
            self.fail(f"{_shown(value)} is not an id (a whole number)", param, ctx)
        # Compared as text first: int() refuses numbers of thousands of digits.
        if len(text.lstrip("+-0")) > len(str(MAX_ID)) or not 1 <= int(text) <= MAX_ID:
            self.fail(f"{_shown(value)} is not an id: ids run from 1 to {MAX_ID}", param, ctx)
        return int(text)


ROW_ID = RowId()


class FiniteFloatRange(click.FloatRange):
    """A :class:`click.FloatRange` that also refuses ``nan`` and the infinities.

    ``nan`` passes every bound (each comparison with it is false), and either one reaches
    arithmetic that cannot hold it: converting to bytes, sleeping, scaling a clock.
    """

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number: float = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{_shown(value)} is not a finite number", param, ctx)
        return number


class StorableText(click.ParamType[str]):
    """Text that is written to the database (a reason, a name), so it must be UTF-8.

    A shell hands over bytes that are not UTF-8 (``$'\\xff'``) as lone surrogates, which
    no database driver can encode: refused here, naming the option, before any write.
    """

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"{_shown(value)} is not UTF-8 text", param, ctx)
        return text


TEXT = StorableText()


class StorablePath(click.Path):
    """A :class:`click.Path` that is also written to the database (the plan a rollout
    started from), so it must be UTF-8 like :class:`StorableText`."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        try:
            os.fsdecode(path).encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"{_shown(os.fsdecode(path))} is not UTF-8 text; rename the file", param, ctx)
        return path


def _shown(value: object) -> str:
    """A value as a message quotes it: on one line, and short even when the input is not."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def operator_name() -> str:
    """Who is acting: the user behind sudo if any, else the OS user."""
    return os.environ.get("SUDO_USER") or getpass.getuser()


def database_url() -> str:
    """The configured database URL, its password registered as a secret.

    Read by :mod:`rolloutd.database_url`, without pydantic-settings, so that rolloutctl starts
    fast; only when that is in doubt by :func:`rolloutd.settings.load_settings`, which says what
    is wrong. So rolloutctl does not check the daemon's other variables: a bad
    ``ROLLOUTD_LOG_LEVEL`` stops ``rolloutd run``, not ``rolloutctl list``.
    """
    from rolloutd.database_url import configured_database_url

    url = configured_database_url()
    if url is None:
        from rolloutd.settings import load_settings

        url = load_settings().database_url.get_secret_value()
    return url


@contextmanager
def _engine() -> Iterator[Engine]:
    """An engine on the configured database, whose schema must be at head."""
    from rolloutd.store.db import check_revision, make_engine

    engine = make_engine(database_url())
    try:
        check_revision(engine)
        yield engine
    finally:
        engine.dispose()


@contextmanager
def database() -> Iterator[Session]:
    """A session in one transaction on the configured database, whose schema must be at head."""
    from rolloutd.store.db import session_factory, transaction

    with _engine() as engine, transaction(session_factory(engine)) as session:
        yield session


@contextmanager
def reading() -> Iterator[Connection]:
    """A connection in one transaction on the configured database (schema at head), for
    commands that only read, with Core statements: they start without the ORM."""
    from rolloutd.store.db import translate_connect_errors

    with _engine() as engine, translate_connect_errors(engine.url), engine.begin() as connection:
        yield connection


def emit(data: Any, output: str, human: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON, or through ``human`` as a table."""
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human(data)
