"""The simulated gateway counts a session's escalation where it counted the session.

HAProxy's sticky split moves stable sessions to the canary when the weight rises (never the
reverse). A session counted as a stable session that ends on the canary must not add its
escalation to the canary's count, or the canary's escalation rate (escalations / sessions) is
inflated at every step change by sessions it never started.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from rolloutd.httpserve import QuietServer
from rolloutd.sim.protocol import POOL_HEADER, SESSION_HEADER
from rolloutd.sim.traffic import EscalationModel, TrafficGenerator, Workload


class _MovingSessions(BaseHTTPRequestHandler):
    """Answers a session's first request from stable and every later one from the canary,
    as after a weight change; later answers hand the session to a human."""

    turns: Counter[str] = Counter()
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        session = self.headers.get(SESSION_HEADER, "")
        with self.lock:
            turn = self.turns[session]
            self.turns[session] += 1
        if turn == 0:
            # A call to a tool nobody offered: a schema violation, which never escalates here.
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "nope", "arguments": "{}"}}
                ],
            }
        else:
            message = {"role": "assistant", "content": "let me get a human"}
        body = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(POOL_HEADER, "stable" if turn == 0 else "canary")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def moving() -> Iterator[str]:
    server = QuietServer(("127.0.0.1", 0), _MovingSessions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_escalation_counts_on_the_pool_that_counted_the_session(moving: str) -> None:
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
