"""What the ``rolloutctl sim`` commands share: the time-scale option, binding a port as bad
input, reading a reference plan, saying "ready", and serving until a signal."""

from __future__ import annotations

import errno
import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from rolloutd.cli.common import FiniteFloatRange
from rolloutd.errors import BadInput

TIME_SCALE = click.option(
    "--time-scale",
    type=FiniteFloatRange(min=1e-4, max=1.0),
    default=0.01,
    help="Wall seconds per simulated second (0.01: a 10 s generation answers in 0.1 s).",
)


def read_plan(path: Path, option: str) -> Any:
    """The plan at ``path`` as YAML data.

    :raises BadInput: it cannot be read or is not a YAML mapping.
    """
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput.one(option, "", f"cannot read the reference plan {path}: {exc}") from None
    if not isinstance(data, dict) or "pools" not in data:
        raise BadInput.one(option, "", f"{path} is not a rollout plan")
    return data


@contextmanager
def listening(option: str, host: str, port: int) -> Iterator[None]:
    """Turn an address that cannot be bound into bad input naming ``option`` (the port), or
    --host when the host is at fault (no such name, not an address of this machine)."""
    import socket

    try:
        yield
    except OSError as exc:
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            option = "--host"
        where = f"{host}:{port}" if port else host
        raise BadInput.one(option, "", f"cannot listen on {where}: {exc.strerror or exc}") from None


def ready(data: dict[str, Any], output: str, line: str | None) -> None:
    """Say the thing serves: one JSON line for scripts, or ``line``."""
    if output == "json":
        click.echo(json.dumps(data))
    elif line is not None:
        click.echo(line)


def stop_on_signal() -> threading.Event:
    """An event set by SIGINT or SIGTERM from now on: one that arrives while the simulated
    engines start still stops them in order, and the files that say they serve go too."""
    stop = threading.Event()
    handler: Callable[[int, Any], None] = lambda signum, frame: stop.set()  # noqa: E731
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def serve_until(stop: threading.Event) -> None:
    """Block until ``stop`` is set."""
    while not stop.wait(1.0):
        pass
