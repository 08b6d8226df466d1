"""Small clients for the simulated engines: a chat request for a case, a metrics scrape."""

from __future__ import annotations

import re
from typing import Any

import httpx

from rolloutd.sim.cases import Case, tool_definitions

# One client for the whole run: building one costs tens of milliseconds (TLS context).
CLIENT = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=200))


def chat(
    url: str, case: Case, *, session: str = "s-1", prompt_tokens: int = 6000, **extra: Any
) -> httpx.Response:
    """Send one tool-call request for ``case`` to a replica (or anything in front of one)."""
    body = {
        "model": "atlas-70b",
        "messages": [{"role": "user", "content": case.message}],
        "tools": tool_definitions(),
        "rolloutd_expected": case.expected(),
        "rolloutd_prompt_tokens": prompt_tokens,
        **extra,
    }
    return CLIENT.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": session})


def tool_call(response: httpx.Response) -> tuple[str, str]:
    """The name and the JSON arguments of the first tool call in a chat response."""
    function = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    return function["name"], function["arguments"]


def scrape(url: str) -> str:
    """The text of ``GET /metrics``."""
    response = CLIENT.get(f"{url}/metrics")
    response.raise_for_status()
    return response.text


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` whose labels include ``labels``.

    :raises AssertionError: no such sample, or more than one.
    """
    found = []
    for line in text.splitlines():
        match = re.match(r"^([^\s{]+)(?:\{(.*)\})? (\S+)$", line)
        if line.startswith("#") or match is None or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(have.get(key) == value for key, value in labels.items()):
            found.append(float(match.group(3)))
    assert len(found) == 1, f"{len(found)} samples of {name}{labels}"
    return found[0]
