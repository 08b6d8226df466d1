"""Log lines: JSON with bound fields, secrets scrubbed from every value however it is nested."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from rolloutd import redact
from rolloutd.logs import configure_logging
from rolloutd.redact import register_secret

TOKEN = "s3cr3t-token-value"
HOOK = f"https://hooks.slack.com/services/{TOKEN}"


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """stderr captured as JSON lines, with a registry of secrets holding the webhook token."""
    captured = io.StringIO()
    monkeypatch.setattr("sys.stderr", captured)
    monkeypatch.setattr(redact, "_secrets", set())
    register_secret(TOKEN)
    configure_logging("info", json_lines=True)
    yield captured
    structlog.reset_defaults()


def last_line(stream: io.StringIO) -> dict[str, Any]:
    """The newest log event written."""
    line: dict[str, Any] = json.loads(stream.getvalue().strip().splitlines()[-1])
    return line


def test_secrets_in_nested_dicts_and_lists_are_scrubbed(stream: io.StringIO) -> None:
    """A webhook response logged as a dict of lists shows *** where the token was."""
    structlog.get_logger("test").warning(
        "webhook refused",
        response={"status": 403, "hops": [HOOK, {"db": "postgresql://ops:hunter2@db/x"}]},
    )

    line = last_line(stream)
    assert TOKEN not in stream.getvalue() and "hunter2" not in stream.getvalue()
    assert line["response"] == {
        "status": 403,
        "hops": ["https://hooks.slack.com/services/***", {"db": "postgresql://ops:***@db/x"}],
    }


def test_an_exception_logged_as_a_value_or_with_its_traceback_is_scrubbed(
    stream: io.StringIO,
) -> None:
    """An exception passed as a field, and one logged with exc_info, both lose the secret."""
    error = RuntimeError(f"POST {HOOK} failed")
    log = structlog.get_logger("test")

    log.error("send failed", error=error)
    as_value = last_line(stream)
    try:
        raise error
    except RuntimeError:
        log.exception("send crashed")
    with_traceback = last_line(stream)

    assert TOKEN not in stream.getvalue()
    assert as_value["error"] == "RuntimeError: POST https://hooks.slack.com/services/*** failed"
    assert "Traceback" in with_traceback["exception"]
    assert "services/***" in with_traceback["exception"]


def test_the_configured_level_filters_events(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At level warning, an info event is dropped and a warning is written."""
    monkeypatch.setattr("sys.stderr", stream)  # pytest swapped its own back in after setup
    configure_logging("warning", json_lines=True)
    log = structlog.get_logger("test")

    log.info("chatter")
    log.warning("worth knowing")

    events = [json.loads(raw)["event"] for raw in stream.getvalue().splitlines()]
    assert events == ["worth knowing"]
