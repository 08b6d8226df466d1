"""Agent sessions as load: the traffic generator behind the tests, benchmarks and the demo.

Each worker runs agent sessions back to back: up to 15 turns, each a chat request with the
session's ``X-Session-Id`` (so a sticky router keeps the session on one pool), a simulated
prompt of ~6,000 tokens (``rolloutd_prompt_tokens``: median 6,000, p99 6,600, which with
~300 output tokens puts prompt+output p99 near 6,900) and the expected tool call. Between
turns the agent "runs the tool" for a few simulated seconds.

It plays the gateway: per pool (from the ``X-Rolloutd-Pool`` response header) it counts
sessions, tool calls, schema violations (jsonschema against the tool's schema) and
escalations to a human. A session escalates with a small base probability, more likely
after a timeout, an error, a bad tool call, or when the model hands off. As the contract in
``rolloutd.gateway`` says, a session's escalation, its first timeout and its first schema
violation each count once, on the pool that counted the session.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rolloutd.gateway import Capture
from rolloutd.sim.cases import make_case, rng_for, schema_of, tool_definitions
from rolloutd.sim.gateway import AgentMetrics
from rolloutd.sim.httpclient import KeepAliveClient
from rolloutd.sim.protocol import POOL_HEADER, SESSION_HEADER
from rolloutd.sim.scoring import score_call

# The bad events a session counts once, by the gateway counter they count in.
_ONCE_PER_SESSION = {"timeout": "session_timeouts", "violation": "session_schema_violations"}


@dataclass(frozen=True)
class Workload:
    """The shape of the reference agent workload; durations are simulated seconds."""

    prompt_median: int = 6_000
    prompt_p99: int = 6_600
    min_turns: int = 3
    max_turns: int = 15
    think_mean_s: float = 6.0
    max_tokens: int = 1_024


@dataclass(frozen=True)
class EscalationModel:
    """Chances that a session ends with a human: per bad event, and at the end anyway."""

    base: float = 0.03
    timeout: float = 0.3
    error: float = 0.3
    violation: float = 0.2
    handoff: float = 0.9


@dataclass
class PoolTally:
    """What the gateway saw on one pool."""

    sessions: int = 0
    requests: int = 0
    ok: int = 0
    timeouts: int = 0
    errors: int = 0
    tool_calls: int = 0
    schema_violations: int = 0
    exact_calls: int = 0
    handoffs: int = 0
    escalations: int = 0
    session_timeouts: int = 0
    session_schema_violations: int = 0
    latencies: list[float] = field(default_factory=list)


@dataclass
class TrafficReport:
    """The outcome of a run, per pool; latencies are the engines' simulated e2e seconds."""

    pools: dict[str, PoolTally] = field(default_factory=dict)
    wall_seconds: float = 0.0

    def total(self, name: str) -> int:
        """A counter summed over pools, e.g. ``total("timeouts")``."""
        return sum(int(getattr(tally, name)) for tally in self.pools.values())

    def latency_quantile(self, q: float, pool: str | None = None) -> float | None:
        """The ``q`` quantile (nearest rank) of e2e latency, on one pool or all."""
        values = sorted(
            v for name, t in self.pools.items() if pool in (None, name) for v in t.latencies
        )
        return values[max(0, math.ceil(q * len(values)) - 1)] if values else None

    def rate(self, name: str, pool: str | None = None) -> float:
        """``name`` (e.g. ``timeouts``) per request, on one pool or all."""
        chosen = [t for p, t in self.pools.items() if pool in (None, p)]
        requests = sum(t.requests for t in chosen)
        return sum(int(getattr(t, name)) for t in chosen) / requests if requests else 0.0


class TrafficGenerator:
    """Concurrent agent sessions against one URL, bounded in sessions, requests or time."""

    def __init__(
        self,
        url: str,
        *,
        concurrency: int = 40,
        gateway: AgentMetrics | None = None,
        workload: Workload | None = None,
        escalation: EscalationModel | None = None,
        seed: int = 0,
        time_scale: float = 0.001,
        max_sessions: int | None = None,
        max_requests: int | None = None,
        duration_s: float | None = None,
        request_timeout_s: float = 60.0,
        model: str = "atlas-70b",
        capture: Capture | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.concurrency = concurrency
        self.gateway = gateway if gateway is not None else AgentMetrics()
        self.workload = workload or Workload()
        self.escalation = escalation or EscalationModel()
        self.seed, self.time_scale, self.model = seed, time_scale, model
        self.max_sessions, self.max_requests, self.duration_s = (
            max_sessions,
            max_requests,
            duration_s,
        )
        self.report = TrafficReport()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sessions = itertools.count()
        self._requests = 0
        self._threads: list[threading.Thread] = []
        self._started = 0.0
        self._tools = tool_definitions()
        self._tool_names = {tool["function"]["name"] for tool in self._tools}
        self._timeout = request_timeout_s
        # The gateway's capture of live tool-calling requests, as a real gateway writes it.
        self.capture = capture

    def run(self) -> TrafficReport:
        """Run until a bound is reached; returns the report.

        :raises ValueError: no bound (sessions, requests or duration) was given.
        """
        if self.max_sessions is None and self.max_requests is None and self.duration_s is None:
            raise ValueError("bound the traffic: max_sessions, max_requests or duration_s")
        return self.start().join()

    def start(self) -> TrafficGenerator:
        """Start the workers in the background (stop them with ``stop()``)."""
        self._started = time.monotonic()
        for index in range(self.concurrency):
            thread = threading.Thread(
                target=self._work, args=(index,), daemon=True, name=f"traffic-{index}"
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> TrafficReport:
        """Ask the workers to finish their current request and stop; returns the report."""
        self._stop.set()
        return self.join()

    def join(self) -> TrafficReport:
        """Wait for the workers (they end at a bound or on ``stop()``)."""
        for thread in self._threads:
            thread.join()
        self.report.wall_seconds = time.monotonic() - self._started
        return self.report

    def _work(self, worker: int) -> None:
        stagger = rng_for("stagger", self.seed, worker).uniform(0.0, 2 * self.workload.think_mean_s)
        if self._stop.wait(stagger * self.time_scale):
            return
        client = KeepAliveClient(self.url, self._timeout)
        try:
            while not self._stopping():
                index = next(self._sessions)
                if self.max_sessions is not None and index >= self.max_sessions:
                    return
                self._session(client, index)
        finally:
            client.close()

    def _stopping(self) -> bool:
        if self.duration_s is not None and time.monotonic() - self._started >= self.duration_s:
            self._stop.set()
        return self._stop.is_set()

    def _take_request(self) -> bool:
        with self._lock:
            if self.max_requests is not None and self._requests >= self.max_requests:
                self._stop.set()
                return False
            self._requests += 1
            return True

    def _session(self, client: KeepAliveClient, index: int) -> None:
        rng = rng_for("session", self.seed, index)
        session = f"sess-{self.seed}-{index:06d}"
        sigma = math.log(self.workload.prompt_p99 / self.workload.prompt_median) / 2.3263
        pool: str | None = None
        # The session's escalation counts where the session was counted: a rising canary
        # weight moves stable sessions to the canary, which must not inherit their fate.
        counted: str | None = None
        escalated = completed = False
        once: set[str] = set()  # the once-per-session events already counted
        turns = rng.randint(self.workload.min_turns, self.workload.max_turns)
        for turn in range(turns):
            if self._stopping() or not self._take_request():
                break
            case = make_case(rng, f"{session}-t{turn:02d}")
            prompt = round(self.workload.prompt_median * math.exp(rng.gauss(0.0, sigma)))
            body: dict[str, Any] = {
                "model": self.model,
                "messages": [
                    {"role": "system", "content": "You are the support agent."},
                    {"role": "user", "content": case.message},
                ],
                "tools": self._tools,
                "tool_choice": "auto",
                "temperature": 0.0,
                "seed": index,
                "max_tokens": self.workload.max_tokens,
                "rolloutd_expected": case.expected(),
                "rolloutd_prompt_tokens": prompt,
            }
            answered, event = self._send(client, body, session, case.tool, case.arguments)
            pool = answered or pool or "unknown"
            if counted is None:
                counted = pool
                self._count(pool, "sessions")
            # A session's turns share a fate, so its first timeout or schema violation is
            # what counts: one trial per session, on its first pool, like its escalation.
            per_session = _ONCE_PER_SESSION.get(event or "")
            if per_session is not None and per_session not in once:
                once.add(per_session)
                self._count(counted, per_session)
            if event and rng.random() < getattr(self.escalation, event):
                escalated = True
                break
            think = min(
                rng.expovariate(1.0 / self.workload.think_mean_s), 10 * self.workload.think_mean_s
            )
            if self._stop.wait(think * self.time_scale):
                break
        else:
            completed = True
        if completed and not escalated:
            escalated = rng.random() < self.escalation.base
        if escalated and counted is not None:
            self._count(counted, "escalations")

    def _send(
        self,
        client: KeepAliveClient,
        body: dict[str, Any],
        session: str,
        tool: str,
        arguments: dict[str, Any],
    ) -> tuple[str | None, str | None]:
        """One request; returns the answering pool and the bad event, if any."""
        try:
            status, headers, content = client.post(
                "/v1/chat/completions", json.dumps(body).encode(), {SESSION_HEADER: session}
            )
        except TimeoutError:
            return None, self._bad("unknown", "timeout")
        except (OSError, http.client.HTTPException):
            return None, self._bad("unknown", "error")
        pool = headers.get(POOL_HEADER.lower(), "unknown")
        if status != 200:
            timeout = status in (429, 503, 504) and b"timeout" in content
            return pool, self._bad(pool, "timeout" if timeout else "error")
        try:
            payload = json.loads(content)
            message = payload["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            # A 200 that is not a chat completion (a misrouted proxy page) is an error.
            return pool, self._bad(pool, "error")
        if self.capture is not None and pool in ("stable", "canary"):
            # What the user's agent sent: the simulator's own fields are not part of it.
            sent = {k: v for k, v in body.items() if not k.startswith("rolloutd_")}
            self.capture.record(
                sent, answer=payload, status_code=status, pool=pool, session=session
            )
        with self._lock:
            tally = self._tally(pool)
            tally.requests += 1
            tally.ok += 1
            tally.latencies.append(float(payload.get("rolloutd", {}).get("e2e_s", 0.0)))
        self.gateway.add(pool, "requests")
        self._observe(pool, payload)
        calls = message.get("tool_calls") or []
        if not calls:
            with self._lock:
                self._tally(pool).handoffs += 1
            return pool, "handoff"
        function = calls[0].get("function") or {}
        name, text = str(function.get("name")), str(function.get("arguments"))
        self._count(pool, "tool_calls")
        offered = name in self._tool_names
        score = score_call(tool, arguments, name, text, schema_of(name if offered else tool))
        if score.exact:
            with self._lock:
                self._tally(pool).exact_calls += 1
        if not offered or not score.schema_valid:
            self._count(pool, "schema_violations")
            return pool, "violation"
        return pool, None

    def _observe(self, pool: str, payload: dict[str, Any]) -> None:
        """The gateway's histograms: the request's duration and its prompt+output tokens."""
        timings, usage = payload.get("rolloutd") or {}, payload.get("usage") or {}
        duration, tokens = timings.get("e2e_s"), usage.get("total_tokens")
        if isinstance(duration, int | float):
            self.gateway.observe(pool, "request_duration_seconds", float(duration))
        if isinstance(tokens, int | float):
            self.gateway.observe(pool, "request_tokens", float(tokens))

    def _bad(self, pool: str, event: str) -> str:
        with self._lock:
            tally = self._tally(pool)
            tally.requests += 1
            if event == "timeout":
                tally.timeouts += 1
            else:
                tally.errors += 1
        self.gateway.add(pool, "requests")
        self.gateway.add(pool, "timeouts" if event == "timeout" else "errors")
        return event

    def _count(self, pool: str, counter: str) -> None:
        with self._lock:
            tally = self._tally(pool)
            setattr(tally, counter, getattr(tally, counter) + 1)
        self.gateway.add(pool, counter)

    def _tally(self, pool: str) -> PoolTally:
        return self.report.pools.setdefault(pool, PoolTally())
