"""The OpenAI chat-completions wire format as the simulated engines speak it.

Simulator extensions in the request body, ignored by real engines (they drop unknown
fields): ``rolloutd_expected`` = ``{"name", "arguments"}``, the tool call that answers the
request (the sim answers it according to its quality profile), and
``rolloutd_prompt_tokens``, the prompt length to simulate instead of sending 6,000 real
tokens. Responses carry the simulated timings under ``rolloutd`` and the answering pool
in the ``X-Rolloutd-Pool`` header.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutd.sim.profiles import Answer

POOL_HEADER = "X-Rolloutd-Pool"
REPLICA_HEADER = "X-Rolloutd-Replica"
SESSION_HEADER = "X-Session-Id"

_ids = itertools.count(1)


class BadRequest(ValueError):
    """The request body is not a chat-completions request the engine accepts."""


@dataclass(frozen=True)
class ChatRequest:
    """The parts of a chat-completions request the simulator uses."""

    model: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expected: dict[str, Any] | None
    prompt_tokens: int
    max_tokens: int | None
    seed: int | None
    raw: dict[str, Any] = field(repr=False)


def parse_chat(body: object) -> ChatRequest:
    """Read a chat-completions body.

    :raises BadRequest: not an object, no messages, or malformed tools.
    """
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    tools: list[dict[str, Any]] = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest("each tool must be {'type': 'function', 'function': {'name', ...}}")
        tools.append(function)
    expected = body.get("rolloutd_expected")
    prompt = body.get("rolloutd_prompt_tokens")
    if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt < 1:
        # Roughly four characters per token, as tokenizers go for English.
        prompt = max(1, len(json.dumps(messages)) // 4)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    seed = body.get("seed")
    return ChatRequest(
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        messages=messages,
        tools=tools,
        expected=expected if isinstance(expected, dict) else None,
        prompt_tokens=prompt,
        max_tokens=max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None,
        seed=seed if isinstance(seed, int) else None,
        raw=body,
    )


def chat_response(
    model: str,
    answer: Answer,
    prompt_tokens: int,
    output_tokens: int,
    finish_reason: str,
    timings: Mapping[str, Any],
) -> dict[str, Any]:
    """A chat-completions response carrying ``answer``."""
    number = next(_ids)
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.tool is not None:
        message["tool_calls"] = [
            {
                "id": f"call_{number:08x}",
                "type": "function",
                "function": {"name": answer.tool, "arguments": answer.arguments},
            }
        ]
        finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
    return {
        "id": f"chatcmpl-{number:012x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": prompt_tokens + output_tokens,
        },
        "rolloutd": dict(timings),
    }


def openai_error(message: str, kind: str, code: int) -> dict[str, Any]:
    """An error body in the OpenAI format that vLLM and Triton's frontend use."""
    return {"error": {"message": message, "type": kind, "code": code}}
