"""Asking an OpenAI-compatible chat endpoint every case of a suite, a bounded number at once.

vLLM and Triton's OpenAI front end both serve ``POST /v1/chat/completions``. Each case is
sent with ``temperature: 0`` and a fixed ``seed``, so the same build gives the same answers
and two builds can be compared case by case. At most ``concurrency`` requests are in flight.

Transport failures (connection refused or reset, timeouts) and answers that say "try again"
(HTTP 429 and 5xx) are retried with a doubling delay; when the retries run out the case is a
*request error*, never a wrong answer: a slow or flapping endpoint must not look like a
model that copies amounts badly. Other HTTP errors (400: prompt too long, 404: no such
model) are request errors at once, since repeating them cannot help.

The endpoint's userinfo and query string never appear in results or messages (see
:func:`public_endpoint`).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit, urlunsplit

import certifi
import httpx

from rolloutd.clock import utc_now
from rolloutd.evaluation.compare import Call, CaseResult, request_error, score_case
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.evaluation.suite import Suite, SuiteCase

CHAT_PATH = "/v1/chat/completions"
DEFAULT_SEED = 1234
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

Progress = Callable[[int, int], None]
"""Called with (cases done, cases in all) after every case."""

Permit = Callable[[float], bool]
"""Asked before every request with the request's timeout: may it start now? A daemon's run
says no once its job's claim would not outlive the request (see ``rolloutd.reconcile.suites``)."""


class RunAbandoned(Exception):
    """The run was stopped before it finished (its permit was withdrawn); nothing is kept."""


@dataclass(frozen=True)
class RunnerOptions:
    """How to ask: concurrency, per-request timeout, retries, and the request's fixed parts.

    ``send_expected`` adds the expected call as ``rolloutd_expected`` to each request; only
    the simulated engines read it (to know which answer to perturb), real engines drop it.
    """

    concurrency: int = 8
    timeout_s: float = 60.0
    retries: int = 2
    backoff_s: float = 0.5
    seed: int = DEFAULT_SEED
    model: str | None = None
    max_tokens: int = 512
    send_expected: bool = False
    headers: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout_s}")
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")


def public_endpoint(url: str) -> str:
    """``url`` without userinfo, query or fragment: safe to store and print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class RunArgs(TypedDict, total=False):
    """How :func:`run_suite` asks, besides the suite and the endpoint.

    ``clock`` stamps the run's start and finish: the wall clock, unless the run belongs to a
    rollout, whose clock its times are compared with.
    """

    role: RunRole
    options: RunnerOptions | None
    progress: Progress | None
    transport: httpx.AsyncBaseTransport | None
    clock: Callable[[], datetime]


def run_suite(suite: Suite, endpoint: str, **how: Unpack[RunArgs]) -> RunSummary:
    """Ask ``endpoint`` every case of ``suite`` and score the answers (blocks until done).

    Runs its own event loop; from async code, await :func:`run_suite_async` instead.
    """
    return asyncio.run(run_suite_async(suite, endpoint, **how))


async def run_suite_async(
    suite: Suite, endpoint: str, *, permit: Permit | None = None, **how: Unpack[RunArgs]
) -> RunSummary:
    """The coroutine behind :func:`run_suite`.

    ``permit`` is asked before every request (retries included) whether it may start, given
    its timeout; a refusal abandons the run (:class:`RunAbandoned`).
    """
    role = how.get("role", "canary")
    options = how.get("options")
    progress = how.get("progress")
    transport = how.get("transport")
    clock = how.get("clock", utc_now)
    options = options or RunnerOptions()
    started = clock()
    results: list[CaseResult | None] = [None] * len(suite.cases)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(suite.cases)):
        queue.put_nowait(index)
    done = 0

    # Loading the CA bundle costs tens of milliseconds: once per run, not once per client.
    tls = ssl.create_default_context(cafile=certifi.where())

    def client() -> httpx.AsyncClient:
        # One client with one connection per worker: httpcore's pool rescans every
        # connection on every event, which made a shared 32-connection pool CPU-bound.
        return httpx.AsyncClient(
            base_url=endpoint.rstrip("/"),
            timeout=options.timeout_s,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            headers=dict(options.headers or {}),
            transport=transport,
            verify=tls,
        )

    if permit is not None and not permit(options.timeout_s):
        raise RunAbandoned("stopped before the first request")
    model = options.model
    if model is None:
        async with client() as first:
            model = await _served_model(first, options.timeout_s)

    async def worker() -> None:
        nonlocal done
        async with client() as own:
            while not queue.empty():
                index = queue.get_nowait()
                results[index] = await _ask(own, suite.cases[index], model, options, permit)
                done += 1
                if progress is not None:
                    progress(done, len(suite.cases))

    workers = min(options.concurrency, len(suite.cases))
    await asyncio.gather(*(worker() for _ in range(workers)))
    cases = tuple(result for result in results if result is not None)
    return RunSummary(
        suite.path,
        suite.sha256,
        public_endpoint(endpoint),
        role,
        cases,
        started,
        clock(),
        extra={"model": model, "seed": options.seed, "concurrency": options.concurrency},
    )


async def _served_model(client: httpx.AsyncClient, timeout_s: float) -> str | None:
    # vLLM and Triton both list what they serve; without an answer the request omits
    # 'model', which vLLM accepts (it serves one model) and the case errors tell the rest.
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/v1/models")
        data = response.json().get("data") or []
        model = data[0].get("id") if data and isinstance(data[0], dict) else None
    except (httpx.HTTPError, TimeoutError, ValueError, AttributeError):
        return None
    return model if isinstance(model, str) else None


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
    client: httpx.AsyncClient,
    case: SuiteCase,
    model: str | None,
    options: RunnerOptions,
    permit: Permit | None = None,
) -> CaseResult:
    body = request_body(case, model, options)
    reason = "not sent"
    started = time.perf_counter()
    for attempt in range(1, options.retries + 2):
        if attempt > 1:
            await asyncio.sleep(options.backoff_s * 2 ** (attempt - 2))
        if permit is not None and not permit(options.timeout_s):
            raise RunAbandoned(f"stopped before case {case.id}")
        try:
            # httpx's timeout bounds each read and write; this bounds the whole request, so
            # a slowly dripping answer cannot outlive the permit it started under.
            async with asyncio.timeout(options.timeout_s):
                response = await client.post(CHAT_PATH, json=body)
        except (httpx.TimeoutException, TimeoutError):
            reason = f"timed out after {options.timeout_s:g}s"
            continue
        except httpx.TransportError as exc:
            # Connection refused or reset: the replica may be restarting; try again.
            reason = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code in RETRY_STATUSES:
            reason = f"HTTP {response.status_code}: {_error_text(response)}"
            continue
        if response.status_code != 200:
            message = f"HTTP {response.status_code}: {_error_text(response)}"
            return request_error(case, message, attempt)
        call = _call_of(response)
        if call is None:
            return request_error(case, "the response is not a chat completion", attempt)
        result = score_case(case, call)
        latency = time.perf_counter() - started
        return _with_attempts(result, attempt, latency)
    return request_error(case, reason, options.retries + 1)


def _with_attempts(result: CaseResult, attempts: int, latency_s: float) -> CaseResult:
    return replace(result, attempts=attempts, latency_s=latency_s)


def _call_of(response: httpx.Response) -> Call | None:
    try:
        message = response.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    calls = message.get("tool_calls") or []
    if not calls:
        return Call(None)
    function = calls[0].get("function", {}) if isinstance(calls[0], dict) else {}
    name = function.get("name") if isinstance(function, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, str):
        # Some servers send the arguments as an object rather than a JSON string.
        arguments = json.dumps(arguments) if arguments is not None else None
    return Call(name if isinstance(name, str) else "", arguments)


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
        message = error.get("message") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        message = response.text
    return str(message or response.reason_phrase)[:200]
