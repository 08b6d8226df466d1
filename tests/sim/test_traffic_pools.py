"""The simulated gateway counts a session's escalation, and its first timeout and schema
violation, once, where it counted the session.

HAProxy's sticky split moves stable sessions to the canary when the weight rises (never the
reverse). A session counted as a stable session that ends on the canary must not add its
escalation to the canary's count, or the canary's escalation rate (escalations / sessions) is
inflated at every step change by sessions it never started; likewise its timeouts and
schema violations, which count once per session so that each session is one trial.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rolloutd.httpserve import QuietServer
from rolloutd.sim.gateway import AgentMetrics
from rolloutd.sim.protocol import POOL_HEADER, SESSION_HEADER
from rolloutd.sim.traffic import EscalationModel, TrafficGenerator, Workload
from tests.sim.helpers import sample

# A call to a tool nobody offered: a schema violation.
_VIOLATION = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "nope", "arguments": "{}"}}
    ],
}


class _SessionTurns(BaseHTTPRequestHandler):
    """Answers a session's first request from stable and every later one from the canary, as
    after a weight change; :meth:`answer` says what each turn gets."""

    turns: Counter[str]
    lock: threading.Lock

    def answer(self, turn: int) -> tuple[int, bytes]:
        """The status and body for the session's ``turn`` (from 0)."""
        raise NotImplementedError

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        session = self.headers.get(SESSION_HEADER, "")
        with self.lock:
            turn = self.turns[session]
            self.turns[session] += 1
        status, body = self.answer(turn)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(POOL_HEADER, "stable" if turn == 0 else "canary")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _choice(message: object) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": message}]}).encode()


class _MovingSessions(_SessionTurns):
    """Later answers hand the session to a human; the first calls a tool nobody offered
    (which never escalates here)."""

    turns: Counter[str] = Counter()
    lock = threading.Lock()

    def answer(self, turn: int) -> tuple[int, bytes]:
        if turn == 0:
            return 200, _choice(_VIOLATION)
        return 200, _choice({"role": "assistant", "content": "let me get a human"})


class _TroubledSessions(_SessionTurns):
    """Turns 0, 1 and 4 call a tool nobody offered, turns 2 and 3 are queue timeouts (504)."""

    turns: Counter[str] = Counter()
    lock = threading.Lock()

    def answer(self, turn: int) -> tuple[int, bytes]:
        if turn in (2, 3):
            return 504, b"queue timeout"
        return 200, _choice(_VIOLATION)


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free local port for the test; yields its URL."""
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def moving() -> Iterator[str]:
    """Sessions that start on stable and move to the canary, where they hand off."""
    yield from _serve(_MovingSessions)


@pytest.fixture
def troubled() -> Iterator[str]:
    """Sessions that start on stable and move to the canary, with timeouts and violations."""
    yield from _serve(_TroubledSessions)


def test_an_escalation_counts_on_the_pool_that_counted_the_session(moving: str) -> None:
    """A session that escalates on the canary after starting on stable escalates on stable."""
    report = TrafficGenerator(
        moving,
        concurrency=2,
        workload=Workload(min_turns=3, max_turns=3, think_mean_s=0.1),
        escalation=EscalationModel(base=0.0, violation=0.0, handoff=1.0),
        time_scale=1e-3,
        max_sessions=10,
    ).run()
    stable, canary = report.pools["stable"], report.pools["canary"]
    assert stable.sessions == 10 and canary.sessions == 0
    assert canary.handoffs == 10, report.pools
    assert (stable.escalations, canary.escalations) == (10, 0)


def test_a_sessions_first_timeout_and_violation_count_once_on_its_first_pool(
    troubled: str,
) -> None:
    """Two timeouts and three violations per session, mostly on the canary, are one session
    timeout and one session violation each, on stable, in the report and the export."""
    gateway = AgentMetrics()
    report = TrafficGenerator(
        troubled,
        concurrency=2,
        gateway=gateway,
        workload=Workload(min_turns=5, max_turns=5, think_mean_s=0.1),
        escalation=EscalationModel(base=0.0, timeout=0.0, error=0.0, violation=0.0, handoff=0.0),
        time_scale=1e-3,
        max_sessions=10,
    ).run()
    stable, canary = report.pools["stable"], report.pools["canary"]
    assert (stable.sessions, canary.sessions) == (10, 0)
    assert (stable.timeouts, canary.timeouts) == (0, 20), report.pools
    assert (stable.schema_violations, canary.schema_violations) == (10, 20)
    assert (stable.session_timeouts, canary.session_timeouts) == (10, 0)
    assert (stable.session_schema_violations, canary.session_schema_violations) == (10, 0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(gateway)
    text = generate_latest(registry).decode()
    for name in ("agent_session_timeouts_total", "agent_session_schema_violations_total"):
        assert sample(text, name, pool="stable") == 10
        assert sample(text, name, pool="canary") == 0
