"""Talking to an OpenAI-compatible chat endpoint: one request with retries and bounds, and
every case of a suite asked a bounded number at once.

Both kinds of suite are asked through here: the tool-call runner
(:mod:`rolloutd.evaluation.runner`) and the reference-answer runner
(:mod:`rolloutd.evaluation.references`) differ only in the request they send and what they
read from the answer.

Transport failures (connection refused or reset, timeouts) and answers that say "try again"
(HTTP 429 and 5xx) are retried with a doubling delay; when the retries run out the case is a
*request error*, never a wrong answer. Other HTTP errors (400: prompt too long, 404: no such
model) are request errors at once, since repeating them cannot help. So is an answer larger
than ``max_answer_bytes``: its body is read only up to that size, so a broken or hostile
endpoint cannot make the runner hold gigabytes.

The endpoint's userinfo and query string never appear in results or messages (see
:func:`public_endpoint`): the userinfo is sent as Basic auth, the query on every request.

The client is aiohttp, not the httpx the rest of rolloutd uses. An engine answers in about
100 ms, so with 128 requests in flight the client's CPU per case adds up to wall time:
httpx with httpcore and anyio cost 1.3-2.1 ms per case, aiohttp about a third of that
(``bench/eval_suite.py``). One session per run holds one keep-alive connection per worker.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import ssl
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import certifi

from rolloutd.evaluation.suite import Suite, SuiteCase
from rolloutd.redact import scrub

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
DEFAULT_SEED = 1234
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
JSON_HEADERS = {"Content-Type": "application/json"}
MAX_ANSWER_BYTES = 1024 * 1024
_CHUNK_BYTES = 64 * 1024

Progress = Callable[[int, int], None]
"""Called with (cases done, cases in all) after every case."""

Permit = Callable[[float], bool]
"""Asked before every request with the request's timeout: may it start now? A daemon's run
says no once its job's claim would not outlive the request (see ``rolloutd.reconcile.runs``)."""


class _Result(Protocol):
    @property
    def case_id(self) -> str: ...


R = TypeVar("R", bound=_Result)


class RunAbandoned(Exception):
    """The run was stopped before it finished (its permit was withdrawn); nothing is kept."""


@dataclass(frozen=True)
class RunnerOptions:
    """How to ask: concurrency, per-request timeout, retries, and the request's fixed parts.

    ``send_expected`` adds the expected call as ``rolloutd_expected`` to each request; only
    the simulated engines read it (to know which answer to perturb), real engines drop it.
    ``max_answer_bytes`` bounds every answer's body (after decompression).
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
    max_answer_bytes: int = MAX_ANSWER_BYTES

    def recorded(self, model: str | None) -> dict[str, Any]:
        """What a stored run keeps of how it was asked (its ``extra``)."""
        return {"model": model, "seed": self.seed, "concurrency": self.concurrency}

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise ValueError(f"timeout must be a finite positive number, got {self.timeout_s}")
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")
        if self.max_answer_bytes < 1:
            raise ValueError(f"max_answer_bytes must be at least 1, got {self.max_answer_bytes}")


def public_endpoint(url: str) -> str:
    """``url`` without userinfo, query or fragment: safe to store and print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True)
class Endpoint:
    """The endpoint as it is asked: URLs without userinfo, which becomes a Basic ``Authorization``
    header, and with the query string, which goes with every request but into no message."""

    chat_url: str
    models_url: str
    headers: Mapping[str, str]
    query: str
    proxy: str | None

    @classmethod
    def parse(cls, url: str, headers: Mapping[str, str] | None = None) -> Endpoint:
        """Split ``url``; ``headers`` are sent with every request."""
        parts = urlsplit(url)
        base = public_endpoint(url)
        query = f"?{parts.query}" if parts.query else ""
        sent = dict(headers or {})
        if parts.username is not None or parts.password is not None:
            userinfo = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            sent["Authorization"] = "Basic " + base64.b64encode(userinfo.encode()).decode()
        return cls(
            base + CHAT_PATH + query, base + MODELS_PATH + query, sent, parts.query, _proxy(url)
        )

    @property
    def tls(self) -> bool:
        """Whether requests go over TLS."""
        return self.chat_url.startswith("https:")

    def hide(self, text: str) -> str:
        """``text`` with the query string and any URL password replaced by ``***``."""
        return scrub(text.replace(self.query, "***") if self.query else text)


def _proxy(url: str) -> str | None:
    # The proxy the environment names (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY unless NO_PROXY
    # covers the host), as httpx honoured it; read once per run, since aiohttp's trust_env
    # would read the environment and ~/.netrc again for every request.
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


async def ask_each(
    suite: Suite,
    endpoint: str,
    ask: Callable[[aiohttp.ClientSession, Endpoint, SuiteCase, str | None], Awaitable[R]],
    options: RunnerOptions,
    permit: Permit | None = None,
    kept: Mapping[int, R] | None = None,
    keep: Callable[[int, R], Awaitable[None]] | None = None,
    progress: Progress | None = None,
) -> tuple[list[R], str | None]:
    """Await ``ask`` for each case of ``suite`` without a result in ``kept``, at most
    ``options.concurrency`` at once: (every case's result in suite order, the model asked).

    The loop behind both kinds of suite: :func:`run_suite_async` asks for tool calls,
    ``rolloutd.evaluation.references`` for text answers.

    :raises RunAbandoned: ``permit`` refused the first request.
    """
    target = Endpoint.parse(endpoint, options.headers)
    results: list[R | None] = [None] * len(suite.cases)
    for position, result in (kept or {}).items():
        if 0 <= position < len(results) and result.case_id == suite.cases[position].id:
            results[position] = result
    todo = [index for index, result in enumerate(results) if result is None]
    pending = iter(todo)
    done = len(suite.cases) - len(todo)
    workers = max(1, min(options.concurrency, len(todo)))
    if todo and permit is not None and not permit(options.timeout_s):
        raise RunAbandoned("stopped before the first request")

    async with _session(target, workers) as session:
        model = options.model
        if model is None and todo:
            model = await _served_model(
                session, target, options.timeout_s, options.max_answer_bytes
            )

        async def worker() -> None:
            nonlocal done
            # One iterator shared by every worker: each case is taken by exactly one.
            for index in pending:
                result = await ask(session, target, suite.cases[index], model)
                if keep is not None:
                    await keep(index, result)
                results[index] = result
                done += 1
                if progress is not None:
                    progress(done, len(suite.cases))

        tasks: list[asyncio.Task[None]] = []
        try:
            for _ in range(workers):
                tasks.append(asyncio.create_task(worker()))
                # Started all at once, every worker would open its connection before any
                # sent a request, and the first answers would come back late. Started one
                # loop turn apart, the first requests go out at once and the workers started
                # last take fewer cases (measured: 128 at once, 1.4-1.7x the ideal; staggered,
                # 1.2-1.3x).
                await asyncio.sleep(0)
            await asyncio.gather(*tasks)
        finally:
            # One worker's RunAbandoned (or a cancelled run) stops the others before the
            # session closes under them.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return [result for result in results if result is not None], model


def _session(target: Endpoint, connections: int) -> aiohttp.ClientSession:
    # Loading the CA bundle costs tens of milliseconds: once per run, and only for TLS.
    tls = ssl.create_default_context(cafile=certifi.where()) if target.tls else True
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, ssl=tls),
        headers=target.headers,
        # Each request is bounded whole by asyncio.timeout in _ask; aiohttp's own timers
        # would only add work per request.
        timeout=aiohttp.ClientTimeout(),
        # An engine sets no cookies worth keeping.
        cookie_jar=aiohttp.DummyCookieJar(),
    )


async def _served_model(
    session: aiohttp.ClientSession, target: Endpoint, timeout_s: float, limit: int
) -> str | None:
    # vLLM and Triton both list what they serve; without an answer the request omits
    # 'model', which vLLM accepts (it serves one model) and the case errors tell the rest.
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.get(target.models_url, proxy=target.proxy, allow_redirects=False) as response,
        ):
            raw = await _read_body(response, limit)
        listing = json.loads(raw) if raw is not None else None
    except (aiohttp.ClientError, TimeoutError, ValueError, RecursionError):
        return None
    data = listing.get("data") if isinstance(listing, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    model = first.get("id") if isinstance(first, dict) else None
    return model if isinstance(model, str) else None


async def _read_body(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The answer's body, or None once it is larger than ``limit`` bytes: reading stops
    there and the connection is dropped rather than drained."""
    body = bytearray()
    while len(body) <= limit:
        chunk = await response.content.read(min(_CHUNK_BYTES, limit + 1 - len(body)))
        if not chunk:
            return bytes(body)
        body += chunk
    response.close()
    return None


async def exchange(
    session: aiohttp.ClientSession,
    target: Endpoint,
    request: dict[str, Any],
    case_id: str,
    options: RunnerOptions,
    permit: Permit | None = None,
) -> tuple[bytes | None, str | None, int]:
    """POST one chat request with the runner's retries: (the 200 answer's body, None,
    attempts), or (None, why there is no usable answer, attempts).

    :raises RunAbandoned: ``permit`` refused a request.
    """
    body = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
    reason = "not sent"
    for attempt in range(1, options.retries + 2):
        if attempt > 1:
            await asyncio.sleep(options.backoff_s * 2 ** (attempt - 2))
        if permit is not None and not permit(options.timeout_s):
            raise RunAbandoned(f"stopped before case {case_id}")
        try:
            # The whole request, answer included, is bounded: a slowly dripping answer
            # cannot outlive the permit it started under.
            async with (
                asyncio.timeout(options.timeout_s),
                session.post(
                    target.chat_url,
                    data=body,
                    headers=JSON_HEADERS,
                    proxy=target.proxy,
                    allow_redirects=False,
                ) as response,
            ):
                status, phrase = response.status, response.reason
                raw = await _read_body(response, options.max_answer_bytes)
        except TimeoutError:
            reason = f"timed out after {options.timeout_s:g}s"
            continue
        except aiohttp.ClientError as exc:
            # Connection refused or reset: the replica may be restarting; try again.
            reason = target.hide(_transport_reason(exc))
            continue
        too_large = f"answer larger than {_size(options.max_answer_bytes)}"
        if status in RETRY_STATUSES:
            reason = f"HTTP {status}: {too_large if raw is None else _error_text(raw, phrase)}"
            continue
        if status != 200:
            text = too_large if raw is None else _error_text(raw, phrase)
            return None, f"HTTP {status}: {text}", attempt
        if raw is None:
            # The same request would get the same oversized answer: no retry.
            return None, too_large, attempt
        return raw, None, attempt
    return None, reason, options.retries + 1


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"


def _one_line(text: str) -> str:
    # aiohttp's parser errors and HTML error pages span lines; a reason is one line.
    return " ".join(text.split())


def _transport_reason(exc: aiohttp.ClientError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Refused, unresolvable or a failed TLS handshake: the operating system's reason
        # says which, and aiohttp's text around it adds only the host and port.
        return f"ConnectError: {exc.os_error}"
    if isinstance(exc, aiohttp.ClientResponseError):
        # An answer that is not HTTP; aiohttp's text would quote the whole URL.
        return _one_line(f"{type(exc).__name__}: {exc.message}")[:200]
    return _one_line(f"{type(exc).__name__}: {exc}")[:200]


def _error_text(raw: bytes, phrase: str | None) -> str:
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):
        answer = None
    if isinstance(answer, dict):
        error = answer.get("error")
        message = error.get("message") if isinstance(error, dict) else error
    else:
        message = raw.decode("utf-8", "replace")
    return _one_line(str(message or phrase or ""))[:200]
