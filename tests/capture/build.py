"""Requests, answers and a clock for the capture tests: a tool-calling chat request whose
user message can carry a distinctive secret, and the stable answer calling the tool."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
SECRET = "card 4111-1111-1111-1111 for Jane Roe"
"""A prompt's content that must never reach a log, an error or a report."""


def body(text: str = "refund order ORD-1", tools: bool = True, tool: str = "issue_refund") -> Any:
    """A chat request with a system and a user message (``text``), offering ``tool``."""
    request: dict[str, Any] = {
        "model": "atlas-70b",
        "messages": [{"role": "system", "content": "agent"}, {"role": "user", "content": text}],
        "metadata": {"user_id": "u-17"},
    }
    if tools:
        request["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool,
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                },
            }
        ]
    return request


def answer(order: str = "ORD-1", name: str = "issue_refund") -> Any:
    """A chat completion calling ``name`` with ``{"order_id": order}``."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"order_id": order})},
    }
    return {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}


class Clock:
    """A wall clock the test sets."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def lines(path: Path) -> list[Any]:
    """The JSON objects of a JSONL file."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def day_files(directory: Path, day: str = "2026-12-04") -> tuple[Path, Path]:
    """The requests and responses files of ``day``."""
    return directory / f"{day}.requests.jsonl", directory / f"{day}.responses.jsonl"
