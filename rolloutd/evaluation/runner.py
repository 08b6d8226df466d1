"""Asking an OpenAI-compatible chat endpoint every case of a suite of tool calls.

vLLM and Triton's OpenAI front end both serve ``POST /v1/chat/completions``. Each case is
sent with ``temperature: 0`` and a fixed ``seed``, so the same build gives the same answers
and two builds can be compared case by case. At most ``concurrency`` requests are in flight;
retries, bounds and the client are :mod:`rolloutd.evaluation.exchange`'s. A case the
endpoint never answered usably is a *request error*, never a wrong answer: a slow or
flapping endpoint must not look like a model that copies amounts badly. So is an answer that
is not a chat completion (not JSON, nested too deeply, the wrong shape).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypedDict, Unpack

import aiohttp

from rolloutd.clock import utc_now
from rolloutd.errors import BadInput
from rolloutd.evaluation.compare import Call, CaseResult, request_error, score_case
from rolloutd.evaluation.exchange import (
    Endpoint,
    Permit,
    Progress,
    RunAbandoned,
    RunnerOptions,
    ask_each,
    exchange,
    public_endpoint,
)
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.evaluation.suite import Suite, SuiteCase

__all__ = [
    "Keep",
    "Permit",
    "Progress",
    "RunAbandoned",
    "RunArgs",
    "RunnerOptions",
    "public_endpoint",
    "request_body",
    "run_suite",
    "run_suite_async",
]

Keep = Callable[[int, CaseResult], Awaitable[None]]
"""Awaited with (position in the suite, result) after every case asked: a daemon's run keeps
the result in the database before its worker takes the next case."""


class RunArgs(TypedDict, total=False):
    """How :func:`run_suite` asks, besides the suite and the endpoint.

    ``clock`` stamps the run's start and finish: the wall clock, unless the run belongs to a
    rollout, whose clock its times are compared with.
    """

    role: RunRole
    options: RunnerOptions | None
    progress: Progress | None
    clock: Callable[[], datetime]


def run_suite(suite: Suite, endpoint: str, **how: Unpack[RunArgs]) -> RunSummary:
    """Ask ``endpoint`` every case of ``suite`` and score the answers (blocks until done).

    Runs its own event loop; from async code, await :func:`run_suite_async` instead.
    """
    return asyncio.run(run_suite_async(suite, endpoint, **how))


async def run_suite_async(
    suite: Suite,
    endpoint: str,
    *,
    permit: Permit | None = None,
    kept: Mapping[int, CaseResult] | None = None,
    keep: Keep | None = None,
    **how: Unpack[RunArgs],
) -> RunSummary:
    """The coroutine behind :func:`run_suite`.

    ``permit`` is asked before every request (retries included) whether it may start, given
    its timeout; a refusal abandons the run (:class:`RunAbandoned`). ``kept`` holds results
    an earlier attempt of the run kept, by position: those cases are not asked again. ``keep``
    is awaited with each new result before its worker goes on.
    """
    if suite.is_reference:
        # Its cases carry answers, not calls: asked by rolloutd.evaluation.references.
        message = "a suite of reference answers is scored by a scorer, not as tool calls"
        raise BadInput.one(suite.path, "reference", message)
    role = how.get("role", "canary")
    options = how.get("options") or RunnerOptions()
    clock = how.get("clock", utc_now)
    started = clock()

    async def ask(
        session: aiohttp.ClientSession, target: Endpoint, case: SuiteCase, model: str | None
    ) -> CaseResult:
        return await _ask(session, target, case, model, options, permit)

    cases, model = await ask_each(
        suite, endpoint, ask, options, permit, kept, keep, how.get("progress")
    )
    where = (suite.path, suite.sha256, public_endpoint(endpoint), role)
    return RunSummary(*where, tuple(cases), started, clock(), extra=options.recorded(model))


def request_body(case: SuiteCase, model: str | None, options: RunnerOptions) -> dict[str, Any]:
    """The chat-completions request for one case."""
    body: dict[str, Any] = {
        "messages": list(case.messages),
        "tools": case.openai_tools(),
        "tool_choice": "auto",
        "temperature": 0,
        "seed": options.seed,
        "max_tokens": options.max_tokens,
    }
    if model is not None:
        body["model"] = model
    if options.send_expected:
        body["rolloutd_expected"] = {
            "name": case.expected_name,
            "arguments": case.expected_arguments,
        }
    return body


async def _ask(
    session: aiohttp.ClientSession,
    target: Endpoint,
    case: SuiteCase,
    model: str | None,
    options: RunnerOptions,
    permit: Permit | None = None,
) -> CaseResult:
    started = time.perf_counter()
    raw, failure, attempt = await exchange(
        session, target, request_body(case, model, options), case.id, options, permit
    )
    if raw is None:
        return request_error(case, failure or "no answer", attempt)
    call = _call_of(raw)
    if call is None:
        return request_error(case, "the response is not a chat completion", attempt)
    result = score_case(case, call)
    latency = time.perf_counter() - started
    return _with_attempts(result, attempt, latency)


def _with_attempts(result: CaseResult, attempts: int, latency_s: float) -> CaseResult:
    return replace(result, attempts=attempts, latency_s=latency_s)


def _call_of(raw: bytes) -> Call | None:
    try:
        message = json.loads(raw)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    if not isinstance(message, dict):
        return None
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        return None
    if not calls:
        return Call(None)
    function = calls[0].get("function", {}) if isinstance(calls[0], dict) else {}
    name = function.get("name") if isinstance(function, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, str):
        # Some servers send the arguments as an object rather than a JSON string.
        try:
            arguments = json.dumps(arguments) if arguments is not None else None
        except (ValueError, RecursionError):
            return None
    return Call(name if isinstance(name, str) else "", arguments)
