"""The agent gateway's metrics contract, a reference exporter, and a capture of live tool
calls, all of which a gateway can embed.

rolloutd's gates judge what only the agent gateway (the service between users' agents and the
engines) can see: sessions, escalations to a human, tool calls that break their schema, and
requests as the client felt them. The gates read these as ``agent_*{pool}`` series, so their
names, types, labels, buckets and above all *what counts* are a contract between rolloutd and
every gateway. This module is that contract as code (``CONTRACT``) and a reference exporter
(``GatewayMetrics``) built on it; the simulator's gateway reads its definitions from here.

It imports only the standard library and prometheus_client, so a gateway can vendor this one
file. What counts, in one place (``request_finished`` and friends repeat it where it is done):

- ``agent_requests_total`` counts every model request the gateway finished: answered, timed
  out or failed, so ``errors / requests`` and ``timeouts / requests`` are shares of all
  requests. A retry is a new request.
- ``agent_timeouts_total`` and ``agent_errors_total`` are disjoint: a timeout is the
  gateway's own deadline expiring or the engine (or router) giving up on a request that
  waited too long in its queue; every other failure is an error.
- The histograms observe *answered* requests only: a failed request has no answer to measure,
  and a timeout's duration is the deadline, which would drag the latency quantile towards it
  and count again what the timeout rate already judges.
- ``agent_session_timeouts_total`` and ``agent_session_schema_violations_total`` count a
  session once, at its first timed-out request or schema-violating tool call, on the pool
  that counted it in ``agent_sessions_total``. A session's turns share a fate, so request
  counts cluster by session; counted once per session against the sessions started, each
  session is one binomial trial. The exporter counts them only for calls given ``session=``.
- Both pools' series exist from the start at 0, so a pool without events reads as a live
  zero, never as an absent series (which the gates treat as "no data", inconclusive).

The gateway also sees the requests themselves. ``Capture`` writes a share of the tool-calling
ones, with their answers, as OpenAI Batch JSONL (a pair of files a day, redacted before they
are written, capped in size, kept for a week), from which ``rolloutctl suite sample`` draws a
tool-argument suite whose reference is what the stable pool answered.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

POOL_LABEL = "pool"
POOLS = ("stable", "canary")
UNKNOWN_POOL = "unknown"
"""The pool of a request that failed before any pool answered it; no gate reads it."""

Outcome = Literal["ok", "timeout", "error"]
SESSION_MEMORY = 100_000
"""How many sessions the reference exporter remembers for its once-per-session counts."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the contract: how PromQL names it, its type, labels, HELP and what counts."""

    name: str
    """The series name the gate templates select (``agent_sessions_total``)."""
    kind: Literal["counter", "histogram"]
    help: str
    counts: str
    """What one increment (counter) or one observation (histogram) is."""
    buckets: tuple[float, ...] = ()
    """A histogram's finite upper bounds, ascending; ``+Inf`` is implied."""
    labels: tuple[str, ...] = (POOL_LABEL,)

    @property
    def family(self) -> str:
        """The family name a parser reports: a counter's name without ``_total``."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


# Fine (1 s) steps where agent latency targets usually sit, coarser beyond, to 2 minutes.
DURATION_BUCKETS: tuple[float, ...] = (
    *(0.25, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20),
    *(25, 30, 40, 60, 90, 120),
)
# Every power-of-two max_seq_len is an edge, with 512-token steps below 8,192; the engines'
# own token histograms stop at 1,000 or 5,000, below the max_seq_len the capacity gate checks.
TOKEN_BUCKETS: tuple[float, ...] = (
    *(256, 512, 1024, 2048, 3072, 4096, 5120, 6144, 6656, 7168, 7680, 8192),
    *(10240, 12288, 16384, 24576, 32768, 49152, 65536, 131072),
)

SESSIONS = MetricSpec(
    "agent_sessions_total",
    "counter",
    "Agent sessions started, by the pool that served them.",
    "a session, once, on the pool that answered its first model request",
)
ESCALATIONS = MetricSpec(
    "agent_escalations_total",
    "counter",
    "Sessions handed over to a human.",
    "a session handed over to a human, once, on the pool that counted it in "
    "agent_sessions_total (a session a weight change moved keeps its first pool)",
)
SESSION_TIMEOUTS = MetricSpec(
    "agent_session_timeouts_total",
    "counter",
    "Sessions with at least one timed-out model request.",
    "a session, once, at its first timed-out model request, on the pool that counted it in "
    "agent_sessions_total (a session a weight change moved keeps its first pool)",
)
SESSION_SCHEMA_VIOLATIONS = MetricSpec(
    "agent_session_schema_violations_total",
    "counter",
    "Sessions with at least one tool call that violates its schema.",
    "a session, once, at its first schema-violating tool call, on the pool that counted it in "
    "agent_sessions_total (a session a weight change moved keeps its first pool)",
)
TOOL_CALLS = MetricSpec(
    "agent_tool_calls_total",
    "counter",
    "Tool calls the model made.",
    "each tool call in an answered model request",
)
SCHEMA_VIOLATIONS = MetricSpec(
    "agent_schema_violations_total",
    "counter",
    "Tool calls whose arguments violate the tool's JSON schema.",
    "a counted tool call naming a tool not offered, or whose arguments are not JSON or "
    "violate the tool's schema (a subset of tool calls)",
)
REQUESTS = MetricSpec(
    "agent_requests_total",
    "counter",
    "Model requests sent by the gateway: answered, timed out or failed.",
    "each model request the gateway finished: answered, timed out or failed (a retry is "
    "another request)",
)
TIMEOUTS = MetricSpec(
    "agent_timeouts_total",
    "counter",
    "Model requests that timed out (queue timeout or client timeout).",
    "a request whose deadline expired at the gateway, or that the engine or router gave up "
    "on after queueing too long (e.g. a 503/504 queue timeout); not an error",
)
ERRORS = MetricSpec(
    "agent_errors_total",
    "counter",
    "Model requests that failed otherwise.",
    "a request that failed any other way: connection error, non-200 status, an answer that "
    "is not a chat completion; not a timeout",
)
REQUEST_DURATION = MetricSpec(
    "agent_request_duration_seconds",
    "histogram",
    "End-to-end duration of answered model requests, seconds.",
    "an answered request's duration, from sending it to its last byte",
    DURATION_BUCKETS,
)
REQUEST_TOKENS = MetricSpec(
    "agent_request_tokens",
    "histogram",
    "Prompt plus output tokens of answered model requests.",
    "an answered request's prompt plus output tokens (the engine's usage)",
    TOKEN_BUCKETS,
)

COUNTERS: tuple[MetricSpec, ...] = (
    SESSIONS,
    ESCALATIONS,
    SESSION_TIMEOUTS,
    SESSION_SCHEMA_VIOLATIONS,
    TOOL_CALLS,
    SCHEMA_VIOLATIONS,
    REQUESTS,
    TIMEOUTS,
    ERRORS,
)
HISTOGRAMS: tuple[MetricSpec, ...] = (REQUEST_DURATION, REQUEST_TOKENS)
CONTRACT: tuple[MetricSpec, ...] = (*COUNTERS, *HISTOGRAMS)

_FAILURES = {"timeout": TIMEOUTS, "error": ERRORS}

# --- bucket rules -----------------------------------------------------------------------------


def latency_bucket_problem(
    bounds: Sequence[float], target_seconds: float, *, max_gap: float = 0.25, headroom: float = 2.0
) -> str | None:
    """Why ``bounds`` cannot judge a latency gate's ``target_seconds``, or None if they can.

    The gate decides only at bucket edges. It needs an edge at or above the target, no more
    than ``max_gap`` above it (a quantile between the target and that edge can never be shown
    slower than the target), and a last edge at least ``headroom`` times the target (a quantile
    above the last edge is a measurement error, so a slow canary would read inconclusive).
    """
    problem = _shape_problem(bounds)
    if problem is not None:
        return problem
    above = [bound for bound in bounds if bound >= target_seconds]
    if not above:
        return (
            f"no bucket at or above the target {target_seconds:g}s (the last is {bounds[-1]:g}s):"
            " the gate can never show the canary slower than the target"
        )
    if above[0] > target_seconds * (1 + max_gap):
        return (
            f"the first bucket at or above the target {target_seconds:g}s is {above[0]:g}s, more "
            f"than {max_gap:.0%} above it: a quantile in between is never shown slower than the "
            f"target; add an edge at {target_seconds:g}"
        )
    if bounds[-1] < target_seconds * headroom:
        return (
            f"the last bucket {bounds[-1]:g}s is below {headroom:g}x the target "
            f"{target_seconds:g}s: a canary that slow reads as a measurement error, not a failure"
        )
    return None


def token_bucket_problem(bounds: Sequence[float], max_seq_len: int) -> str | None:
    """Why ``bounds`` cannot judge a capacity gate at ``max_seq_len``, or None if they can.

    The capacity gate compares the p99 of prompt+output tokens with ``max_seq_len``; a p99
    above the last finite edge is a measurement error, so the edges must reach the limit.
    """
    problem = _shape_problem(bounds)
    if problem is not None:
        return problem
    if bounds[-1] < max_seq_len:
        return (
            f"the last bucket {bounds[-1]:g} tokens is below max_seq_len {max_seq_len}: a p99 "
            "near the limit reads as a measurement error, not a failure"
        )
    return None


def _shape_problem(bounds: Sequence[float]) -> str | None:
    if not bounds:
        return "no buckets"
    if not all(math.isfinite(bound) and bound > 0 for bound in bounds):
        return "buckets must be positive and finite (+Inf is implied)"
    if any(later <= earlier for earlier, later in pairwise(bounds)):
        return "buckets must be strictly ascending"
    return None


# --- the reference exporter -------------------------------------------------------------------


class GatewayMetrics:
    """The contract's series on a prometheus_client registry, and the calls that count them.

    Thread-safe (prometheus_client's metrics are, and the session memory has a lock). Every
    method takes the pool that answered (``stable`` or ``canary``, from the router's pool
    header), or ``unknown`` when none did. Besides the contract's series, prometheus_client
    exports a ``<name>_created`` gauge per series; the gates ignore them
    (``PROMETHEUS_DISABLE_CREATED_SERIES=True`` drops them).

    The once-per-session counters (session timeouts, session schema violations) need the
    session's id, passed as ``session=``: the exporter remembers each session's first pool
    (the one ``session_started`` gave, else the first it was called with) and which of the
    two it has counted, for the ``max_sessions`` sessions used most recently. The bound: a
    session is forgotten only after ``max_sessions`` other sessions (100,000 by default)
    have been seen since its last call, and only then can a later timeout or violation of it
    count a second time (on that later call's pool). Calls without ``session=`` count
    everything else and never these two.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
        token_buckets: Sequence[float] = TOKEN_BUCKETS,
        max_sessions: int = SESSION_MEMORY,
    ) -> None:
        """Register the contract's metrics on ``registry`` (a fresh one by default), and
        remember up to ``max_sessions`` sessions for the once-per-session counts.

        :raises ValueError: a bucket list is empty, not ascending or not finite, or
            ``max_sessions`` is below 1.
        """
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {max_sessions}")
        for which, bounds in (("duration", duration_buckets), ("token", token_buckets)):
            problem = _shape_problem(bounds)
            if problem is not None:
                raise ValueError(f"{which} buckets: {problem}")
        self.registry = registry if registry is not None else CollectorRegistry()
        self.duration_buckets = tuple(float(bound) for bound in duration_buckets)
        self.token_buckets = tuple(float(bound) for bound in token_buckets)
        self._counters = {spec.name: _counter(spec, self.registry) for spec in COUNTERS}
        self._duration = _histogram(REQUEST_DURATION, self.duration_buckets, self.registry)
        self._tokens = _histogram(REQUEST_TOKENS, self.token_buckets, self.registry)
        # Series that exist read 0; absent ones read "no data" and leave a gate inconclusive.
        for pool in POOLS:
            for metric in (*self._counters.values(), self._duration, self._tokens):
                metric.labels(pool=pool)
        self._exporter: Exporter | None = None
        self.max_sessions = max_sessions
        # Least recently used first: the oldest entry is the one to forget.
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._sessions_lock = threading.Lock()

    def session_started(self, pool: str, *, session: str | None = None) -> None:
        """Count a session, once, when its first model request finishes (the pool is known).

        With ``session=``, that pool becomes the session's first pool, on which its
        once-per-session counts land; call this no later than that request's
        :meth:`request_finished`, or the first pool is the one that call saw.
        """
        label = _pool(pool)
        self._count(SESSIONS, label)
        if session is not None:
            with self._sessions_lock:
                self._remember(session, label).pool = label

    def escalated(self, pool: str) -> None:
        """Count a session handed over to a human, on the pool it was counted on by
        :meth:`session_started`: a session a weight change moved to the other pool keeps its
        first pool, or the escalation rate would mix two pools' sessions."""
        self._count(ESCALATIONS, pool)

    def tool_call(self, pool: str, *, schema_ok: bool, session: str | None = None) -> None:
        """Count one tool call of an answered request; ``schema_ok=False`` when it names a tool
        not offered, or its arguments are not JSON or violate the tool's schema.

        With ``session=``, the session's first violating call also counts the session, once,
        in ``agent_session_schema_violations_total`` on the session's first pool.
        """
        label = _pool(pool)
        self._count(TOOL_CALLS, label)
        if not schema_ok:
            self._count(SCHEMA_VIOLATIONS, label)
        if session is not None:
            self._count_session(
                session, label, SESSION_SCHEMA_VIOLATIONS if not schema_ok else None
            )

    def request_finished(
        self,
        pool: str,
        *,
        outcome: Outcome,
        duration_s: float | None = None,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        session: str | None = None,
    ) -> None:
        """Count one finished model request and, if answered, observe its duration and tokens.

        Every outcome counts in ``agent_requests_total``; ``timeout`` also in timeouts, ``error``
        in errors. For ``ok`` the duration is required and the tokens are observed when both
        are known (a streamed answer has usage only if the gateway asked for it); for the
        others they are ignored. With ``session=``, the session's first ``timeout`` also
        counts the session, once, in ``agent_session_timeouts_total`` on its first pool.

        :raises ValueError: an unknown outcome or pool, an ``ok`` without a duration, or a
            negative duration or token count.
        """
        failure = _FAILURES.get(outcome)
        if failure is None and outcome != "ok":
            raise ValueError(f"unknown outcome {outcome!r}; known: ok, timeout, error")
        label = _pool(pool)
        if failure is not None:
            self._counters[REQUESTS.name].labels(pool=label).inc()
            self._counters[failure.name].labels(pool=label).inc()
        else:
            if duration_s is None:
                raise ValueError("an answered request needs its duration_s")
            tokens = (prompt_tokens, output_tokens)
            if duration_s < 0 or any(n is not None and n < 0 for n in tokens):
                raise ValueError("durations and token counts cannot be negative")
            self._counters[REQUESTS.name].labels(pool=label).inc()
            self._duration.labels(pool=label).observe(duration_s)
            if prompt_tokens is not None and output_tokens is not None:
                self._tokens.labels(pool=label).observe(prompt_tokens + output_tokens)
        if session is not None:
            self._count_session(session, label, SESSION_TIMEOUTS if failure is TIMEOUTS else None)

    def serve(self, port: int, addr: str = "127.0.0.1") -> str:
        """Export ``/metrics`` on ``addr:port`` (0: a free port) in a thread; returns the URL.

        Prometheus on another host needs ``addr="0.0.0.0"``. A gateway with its own HTTP
        server can mount ``prometheus_client.make_wsgi_app(metrics.registry)`` (or
        ``make_asgi_app``) at ``/metrics`` instead.
        """
        self._exporter = Exporter(self.registry, port, addr)
        return self._exporter.url

    def close(self) -> None:
        """Stop the exporter started by ``serve()``; nothing if none runs."""
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None

    def _count(self, spec: MetricSpec, pool: str) -> None:
        self._counters[spec.name].labels(pool=_pool(pool)).inc()

    def _count_session(self, session: str, pool: str, fact: MetricSpec | None) -> None:
        """Remember ``session`` (first seen on ``pool``) and count ``fact``, if given, once
        per session, on the session's first pool."""
        with self._sessions_lock:
            facts = self._remember(session, pool)
            if fact is None or fact.name in facts.counted:
                return
            facts.counted = (*facts.counted, fact.name)
            first = facts.pool
        self._counters[fact.name].labels(pool=first).inc()

    def _remember(self, session: str, pool: str) -> _Session:
        """The session's facts, most recently used now; a new one starts on ``pool``. Call
        with the sessions lock held."""
        facts = self._sessions.get(session)
        if facts is not None:
            self._sessions.move_to_end(session)
            return facts
        facts = self._sessions[session] = _Session(pool)
        if len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return facts


@dataclass(slots=True)
class _Session:
    """What the exporter remembers of one session: its first pool and what it counted."""

    pool: str
    # A tuple, not a set: at most two names, and 100,000 empty sets would weigh 20 MB.
    counted: tuple[str, ...] = ()


class Exporter:
    """``/metrics`` of one registry, served over HTTP from a thread until :meth:`close`."""

    def __init__(self, registry: CollectorRegistry, port: int, addr: str) -> None:
        """Listen on ``addr:port`` (0: a free port); ``url`` says where."""
        self._server, _thread = start_http_server(port, addr=addr, registry=registry)
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{self._server.server_port}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()


def _pool(pool: str) -> str:
    # A closed set of values: a typo ("Canary") would otherwise be a series no gate reads.
    if pool not in (*POOLS, UNKNOWN_POOL):
        raise ValueError(f"unknown pool {pool!r}; known: {', '.join((*POOLS, UNKNOWN_POOL))}")
    return pool


def _counter(spec: MetricSpec, registry: CollectorRegistry) -> Counter:
    return Counter(spec.name, spec.help, spec.labels, registry=registry)


def _histogram(
    spec: MetricSpec, buckets: tuple[float, ...], registry: CollectorRegistry
) -> Histogram:
    return Histogram(spec.name, spec.help, spec.labels, buckets=buckets, registry=registry)


# --- the capture: live tool-calling requests in OpenAI Batch format ---------------------------

CAPTURE_KEY = "rolloutd"
"""The key rolloutd adds to each Batch *output* line: ``{"pool", "session", "at"}`` (the pool
that answered, the sha256 of the session id, the UTC time the answer was recorded). Readers of
the Batch format ignore a key they do not know."""
REQUESTS_SUFFIX = ".requests.jsonl"
RESPONSES_SUFFIX = ".responses.jsonl"
CHAT_URL = "/v1/chat/completions"
CAPTURE_FILE_MODE = 0o640
CAPTURE_DIRECTORY_MODE = 0o750
"""Captured prompts are for the gateway's group (where rolloutd reads them), not every user."""
_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.(requests|responses)\.jsonl$")
_SEGMENT = re.compile(r"^([A-Za-z0-9_-]+)?((?:\[(?:\*|\d+)\])*)$")
_INDEX = re.compile(r"\[(\*|\d+)\]")
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0)


@dataclass(frozen=True)
class Redaction:
    """One rule: ``drop`` or ``hash`` the value at ``path`` of the request or response body.

    Written ``ACTION:DOCUMENT.PATH``: ``drop:request.metadata.user_id``,
    ``hash:request.messages[*].content``, ``drop:response.choices[*].message.content``. A
    path is keys (letters, digits, ``_``, ``-``) separated by dots, each optionally followed
    by ``[*]`` (every item of a list) or ``[N]`` (item N, from 0); a path that does not exist
    in a body is left alone. ``drop`` removes the key (or the list items); ``hash`` replaces
    the value by ``"sha256:"`` and the hex sha256 of its canonical JSON, so equal values stay
    equal and nothing of them can be read back.
    """

    action: Literal["drop", "hash"]
    document: Literal["request", "response"]
    path: tuple[str | int | None, ...]
    """Keys (str), list indexes (int) and every item of a list (None)."""
    text: str

    @classmethod
    def parse(cls, text: str) -> Redaction:
        """The rule ``text`` says.

        :raises ValueError: naming what in ``text`` is wrong.
        """
        action, colon, where = text.partition(":")
        if not colon or action not in ("drop", "hash"):
            raise ValueError(
                f"redaction rule {text!r}: expected 'drop:' or 'hash:' and a path, e.g. "
                "'hash:request.messages[*].content'"
            )
        document, dot, rest = where.partition(".")
        if document not in ("request", "response") or not dot or not rest:
            raise ValueError(
                f"redaction rule {text!r}: the path starts with 'request.' or 'response.' "
                "and names a field"
            )
        path: list[str | int | None] = []
        for segment in rest.split("."):
            match = _SEGMENT.match(segment)
            if match is None or not segment:
                raise ValueError(f"redaction rule {text!r}: bad path segment {segment!r}")
            key, indexes = match.groups()
            if key is not None:
                path.append(key)
            for index in _INDEX.findall(indexes):
                path.append(None if index == "*" else int(index))
        return cls(action, document, tuple(path), text)  # type: ignore[arg-type]

    def apply(self, body: Any) -> Any:
        """``body`` with this rule applied: a copy where it changed anything, never the
        original changed."""
        return _redact(body, self.path, self.action)


def _redact(node: Any, path: tuple[str | int | None, ...], action: str) -> Any:
    if not path:
        return None if action == "drop" else _digest(node)
    step, rest = path[0], path[1:]
    if isinstance(step, str):
        if not isinstance(node, dict) or step not in node:
            return node
        copy = dict(node)
        if not rest and action == "drop":
            del copy[step]
        else:
            copy[step] = _redact(node[step], rest, action)
        return copy
    if not isinstance(node, list):
        return node
    chosen = range(len(node)) if step is None else [step] if 0 <= step < len(node) else []
    if not rest and action == "drop":
        gone = set(chosen)
        return [item for i, item in enumerate(node) if i not in gone]
    copy_list = list(node)
    for i in chosen:
        copy_list[i] = _redact(node[i], rest, action)
    return copy_list


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def session_digest(session: str) -> str:
    """The session id as the capture stores it: its sha256 (the raw id never is)."""
    return hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()


class Capture:
    """Writes a share of live tool-calling chat requests and their answers as OpenAI Batch
    JSONL, for rolloutd to sample suites from (``rolloutctl suite sample``).

    **The files.** Per UTC day, two files in ``directory``, joined by ``custom_id``:

    - ``YYYY-MM-DD.requests.jsonl``: Batch *input* lines, what vLLM's ``run-batch`` and the
      OpenAI Batch API read: ``{"custom_id", "method": "POST", "url": "/v1/chat/completions",
      "body"}``, the body being the request the gateway forwarded (redacted).
    - ``YYYY-MM-DD.responses.jsonl``: Batch *output* lines, what ``run-batch`` writes:
      ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}``,
      plus rolloutd's key :data:`CAPTURE_KEY`: ``"rolloutd": {"pool", "session", "at"}``, the
      pool that answered (``stable``, ``canary``; ``unknown`` when none did), the hex sha256
      of the session id (:func:`session_digest`; the id itself is never written; null without
      one) and when the answer was recorded (ISO 8601 UTC, ``2026-12-04T10:00:00.123456Z``),
      which also names the day's files. Readers of the Batch format ignore an unknown key.

    **What is sampled.** Only requests whose body offers ``tools`` (a non-empty list), each
    with probability ``share``. With a session id the draw is a hash (BLAKE2b keyed by
    ``seed``) of the session id and the request's turn (its number of messages and the length
    of the last one) against ``share``: the same request draws the same in any thread, order,
    restart or gateway replica with the seed, and no lock is taken. The turns of a session
    draw apart, not the session as a whole: a day's sample then spreads over many sessions
    rather than a few whole ones, whose turns share a task and a fate and would make the
    suite's cases less independent than its gates count them; a retried turn draws as its
    first attempt did (the sample drops the duplicate). Without a session id, a draw from a
    generator seeded with ``seed`` (reproducible for one thread's sequence of requests).
    ``seed=None`` draws a key at construction.

    **Redaction** (:class:`Redaction`; rules are parsed when the capture is made) is applied
    to the request and the answer before anything is serialised or written.

    **A size cap.** Once a request's two lines would take the day's files past
    ``max_bytes_per_day`` bytes, the day is full: that request and the day's further ones are
    counted in ``skipped_over_cap`` and not written. The count starts from what the files held
    when this process opened them, so N processes sharing a directory may write up to N caps.

    **Retention.** Day files dated more than ``retention`` (7 days by default; an int is
    days) before today are deleted when the capture is made and at each new day (best
    effort: a file that cannot be deleted stays until the next try). Other files are left
    alone.

    **Writing.** Each line is appended whole by one unbuffered ``O_APPEND`` write under a
    lock, the input line before its output line, so a crash leaves at most a truncated last
    line (the reader reports and skips it; the next open ends it, so the line after a restart
    is whole). Files are created ``0640`` and the directory ``0750``. A write that fails (a
    full disk, a vanished directory) loses that request, counts it in ``failed`` and never
    raises: a capture must not fail the user's request.

    Thread-safe. Only the standard library is used, so a gateway can vendor this file.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        share: float = 0.05,
        redact: Sequence[str | Redaction] = (),
        max_bytes_per_day: int = 512 * 1024 * 1024,
        retention: int | timedelta = 7,
        seed: int | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Capture into ``directory`` (created if missing), deleting the days past
        ``retention`` now.

        :raises ValueError: a share outside 0-1, a bad redaction rule, a cap that is not
            positive or a retention shorter than a day.
        :raises OSError: the directory cannot be created.
        """
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must lie between 0 and 1, not {share!r}")
        if max_bytes_per_day <= 0:
            raise ValueError(f"max_bytes_per_day must be positive, not {max_bytes_per_day}")
        keep = retention if isinstance(retention, timedelta) else timedelta(days=retention)
        if keep < timedelta(days=1):
            raise ValueError(f"retention must be at least one day, not {retention!r}")
        self.rules = tuple(r if isinstance(r, Redaction) else Redaction.parse(r) for r in redact)
        self.directory = Path(directory)
        self.directory.mkdir(mode=CAPTURE_DIRECTORY_MODE, parents=True, exist_ok=True)
        self.share = share
        self.max_bytes_per_day = max_bytes_per_day
        self.retention = keep
        self._clock = clock or (lambda: datetime.now(UTC))
        # share 1.0 gives 2**64, above every 64-bit draw; share 0, below every one.
        self._threshold = math.floor(share * 2**64)
        self._key = os.urandom(32) if seed is None else hashlib.sha256(b"%d" % seed).digest()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._day: date | None = None
        self._fds: tuple[int, int] | None = None
        self._bytes = 0
        self._full = False
        self.captured = 0
        self.skipped_over_cap = 0
        self.failed = 0
        self._delete_expired(self._clock().astimezone(UTC).date())

    def record(
        self,
        body: Mapping[str, Any],
        *,
        answer: Mapping[str, Any] | None,
        status_code: int,
        pool: str,
        session: str | None = None,
    ) -> bool:
        """Offer one finished chat request (``body``) and its answer (the response's JSON body,
        None when it had none) to the capture; whether it was written.

        :raises ValueError: an unknown pool.
        """
        label = _pool(pool)
        tools = body.get("tools")
        if not isinstance(tools, list) or not tools or not self._drawn(body, session):
            return False
        request: Any = body
        response: Any = answer
        for rule in self.rules:
            if rule.document == "request":
                request = rule.apply(request)
            elif response is not None:
                response = rule.apply(response)
        now = self._clock().astimezone(UTC)
        token = uuid.uuid4().hex  # one draw names the three ids, each unique with it
        custom_id = f"req-{token}"
        input_line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": request}
        output_line = {
            "id": f"batch_req_{token}",
            "custom_id": custom_id,
            "response": {
                "status_code": status_code,
                "request_id": f"req_{token}",
                "body": response,
            },
            "error": None,
            CAPTURE_KEY: {
                "pool": label,
                "session": None if session is None else session_digest(session),
                "at": now.isoformat().replace("+00:00", "Z"),
            },
        }
        return self._append(now.date(), (_jsonl(input_line), _jsonl(output_line)))

    def _drawn(self, body: Mapping[str, Any], session: str | None) -> bool:
        """Whether this request is in the share (the class docstring says how it is drawn)."""
        if session is None:
            with self._lock:
                return self._random.random() < self.share
        turn = f"{session}\0{_turn(body)}".encode("utf-8", "surrogatepass")
        draw = hashlib.blake2b(turn, digest_size=8, key=self._key).digest()
        return int.from_bytes(draw, "big") < self._threshold

    def _append(self, day: date, lines: tuple[bytes, bytes]) -> bool:
        size = len(lines[0]) + len(lines[1])
        with self._lock:
            try:
                if self._day != day or self._fds is None:
                    self._open(day)
                assert self._fds is not None
                if self._full or self._bytes + size > self.max_bytes_per_day:
                    # Past the cap the day is full: a smaller request later would still fit,
                    # but a day that stops at one point is easier to read than one with gaps.
                    self._full = True
                    self.skipped_over_cap += 1
                    return False
                for fd, line in zip(self._fds, lines, strict=True):
                    _write_all(fd, line)
            except OSError:
                # A full disk or a vanished directory loses this request, not the user's
                # answer; the files are opened afresh for the next one.
                self.failed += 1
                self._close_files()
                return False
            self._bytes += size
            self.captured += 1
            return True

    def _open(self, day: date) -> None:
        """Open ``day``'s files for appending (at a new day: expire old days first). Call
        with the lock held.

        :raises OSError: a file cannot be opened.
        """
        self._close_files()
        self._delete_expired(day)
        self.directory.mkdir(mode=CAPTURE_DIRECTORY_MODE, parents=True, exist_ok=True)
        fds: list[int] = []
        size = 0
        try:
            for suffix in (REQUESTS_SUFFIX, RESPONSES_SUFFIX):
                path = self.directory / f"{day.isoformat()}{suffix}"
                fd = os.open(path, _OPEN_FLAGS, CAPTURE_FILE_MODE)
                fds.append(fd)
                end = os.lseek(fd, 0, os.SEEK_END)
                if end and _last_byte(fd) != b"\n":
                    # A crash cut the last line: end it, or the next line is glued to it and
                    # lost with it.
                    _write_all(fd, b"\n")
                    end += 1
                size += end
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        self._fds = (fds[0], fds[1])
        self._day = day
        self._bytes = size
        self._full = False

    def _delete_expired(self, today: date) -> None:
        oldest = today - timedelta(days=self.retention.days)
        try:
            paths = list(self.directory.iterdir())
        except OSError:
            return  # tried again at the next day
        for path in paths:
            match = _DAY_FILE.match(path.name)
            if match is None:
                continue
            try:
                if date.fromisoformat(match.group(1)) < oldest:
                    path.unlink(missing_ok=True)
            except (ValueError, OSError):
                continue  # not a date (2026-13-45), or not ours to delete: left alone

    def _close_files(self) -> None:
        if self._fds is not None:
            for fd in self._fds:
                os.close(fd)
        self._fds = None
        self._day = None

    def close(self) -> None:
        """Close the day's files (a later request opens them again)."""
        with self._lock:
            self._close_files()

    def expire(self) -> None:
        """Delete the days past ``retention`` now (the capture also does at each new day)."""
        with self._lock:
            self._delete_expired(self._clock().astimezone(UTC).date())

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _turn(body: Mapping[str, Any]) -> str:
    """What tells a session's turns apart, cheaply: the number of messages and the length
    of the last one's content (a session's history grows, and its newest message differs)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "0"
    last = messages[-1]
    content = last.get("content") if isinstance(last, dict) else None
    return f"{len(messages)}:{len(content) if isinstance(content, str | list) else 0}"


def _last_byte(fd: int) -> bytes:
    os.lseek(fd, -1, os.SEEK_END)  # appends still go to the end (O_APPEND)
    return os.read(fd, 1)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a write may take less than it was given
        view = view[os.write(fd, view) :]


def _jsonl(line: Mapping[str, Any]) -> bytes:
    try:
        return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    except UnicodeEncodeError:
        # A lone surrogate (JSON allows "\ud800") is no UTF-8: escaped, the line stays JSON.
        return (json.dumps(line, separators=(",", ":")) + "\n").encode()
