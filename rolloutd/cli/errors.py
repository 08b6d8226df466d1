"""The one boundary where errors become exit codes and one-line messages, never tracebacks.

Exit codes are a contract that scripts rely on: 0 ok, 1 runtime failure (the database
or another service could not be reached), 2 bad input, 3 refused in the current state or a
check failed (``plan check``, ``eval``).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from rolloutd.errors import BadInput, NotFound, Refused, RolloutdError
from rolloutd.redact import scrub

OK, RUNTIME_FAILURE, BAD_INPUT, REFUSED = 0, 1, 2, 3


def run_cli(command: click.Command, prog_name: str, argv: list[str] | None = None) -> int:
    """Run a click command, turning every error into a message on stderr and an exit code."""
    with _printable_anything():
        return _run(command, prog_name, argv)


def _run(command: click.Command, prog_name: str, argv: list[str] | None) -> int:
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.Abort:
        _say(prog_name, "interrupted")
        return RUNTIME_FAILURE
    except click.ClickException as exc:
        exc.show()
        return (
            BAD_INPUT if isinstance(exc, click.UsageError | click.BadParameter) else exc.exit_code
        )
    except BadInput as exc:
        for problem in exc.problems:
            _say(prog_name, str(problem))
        return BAD_INPUT
    except NotFound as exc:
        _say(prog_name, str(exc))
        return BAD_INPUT
    except Refused as exc:
        _say(prog_name, f"refused: {exc}")
        return REFUSED
    except RolloutdError as exc:
        _say(prog_name, str(exc))
        return RUNTIME_FAILURE
    except BrokenPipeError:
        # `rolloutctl list | head`: the reader left; that is not an error worth a message.
        sys.stderr.close()
        return OK
    except Exception as exc:
        if os.environ.get("ROLLOUTD_DEBUG"):
            raise
        name = type(exc).__name__
        _say(prog_name, f"internal error: {name}: {exc} (ROLLOUTD_DEBUG=1 shows the traceback)")
        return RUNTIME_FAILURE
    return OK


@contextmanager
def _printable_anything() -> Iterator[None]:
    """Let stdout and stderr print any text, as escapes where their encoding cannot.

    An argument that is not UTF-8 (a path named in Latin-1) reaches Python as lone
    surrogates; echoed back in a message, it would fail a strict UTF-8 stream (the default
    under en_US.UTF-8) and turn bad input into a crash.
    """
    strict = [
        stream
        for stream in (sys.stdout, sys.stderr)
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict"
    ]
    for stream in strict:
        stream.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        for stream in strict:
            if not stream.closed:
                stream.reconfigure(errors="strict")


def _say(prog_name: str, message: str) -> None:
    click.echo(f"{prog_name}: {scrub(message)}", err=True)
