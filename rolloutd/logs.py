"""Structured logs: JSON lines when not on a terminal, readable on one, secrets scrubbed.

Every event passes :func:`_scrub_secrets` last, so a webhook URL or a database password
that slipped into an exception text, a nested dict or a list is replaced before the line is
written. Levels are the four that ``ROLLOUTD_LOG_LEVEL`` accepts (see ``rolloutd.settings``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from rolloutd.redact import scrub_value


def _scrub_secrets(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in list(event.items()):
        event[key] = scrub_value(value)
    return event


def configure_logging(level: str = "info", *, json_lines: bool | None = None) -> None:
    """Set up structlog for the daemon: one event per line on stderr."""
    as_json = not sys.stderr.isatty() if json_lines is None else json_lines
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
