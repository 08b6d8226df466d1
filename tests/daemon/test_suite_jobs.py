"""A suite run is a job the leader holds: SIGTERM during a run abandons its requests and the
process exits in time, and the next leader runs the suite once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from rolloutd.httpserve import QuietServer
from tests.plans import pools

from .helpers import WAIT, Daemons, Db, Workspace, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CASES = 12
CONCURRENCY = 2
SLOW_SECONDS = 30.0  # an answer the stopping leader must not wait for


class Engine:
    """An OpenAI-compatible chat endpoint that answers every case with the expected call,
    after a delay that the test lifts; it records who asked what, and when."""

    def __init__(self) -> None:
        self.fast = threading.Event()
        self.lock = threading.Lock()
        self.requests: list[tuple[str, float]] = []  # (User-Agent, monotonic start)
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer({"object": "list", "data": [{"id": "atlas-70b"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                with engine.lock:
                    engine.requests.append((self.headers.get("User-Agent", ""), time.monotonic()))
                engine.fast.wait(SLOW_SECONDS)
                call = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
                message = {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": call}],
                }
                self._answer({"choices": [{"index": 0, "message": message}]})

            def _answer(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up on the request

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def asked_by(self, instance: str) -> list[float]:
        """When each request of rolloutd ``instance`` arrived."""
        with self.lock:
            return [at for agent, at in self.requests if agent == f"rolloutd ({instance})"]

    def close(self) -> None:
        self.fast.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engines() -> Iterator[tuple[Engine, Engine]]:
    """(stable, canary) engines, slow until the test says otherwise."""
    pair = Engine(), Engine()
    yield pair
    for engine in pair:
        engine.close()


def write_suite(path: Path) -> Path:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    lines = [
        json.dumps(
            {
                "id": f"weather-{n:02d}",
                "messages": [{"role": "user", "content": f"Weather in Paris? ({n})"}],
                "tools": [tool],
                "expected": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        )
        for n in range(CASES)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def start_suite_rollout(db: Db, root: Path, stable: Engine, canary: Engine) -> int:
    """A rollout whose first step waits on the suite gate, against the two engines."""
    workspace = Workspace(root, "suite")
    suite = {
        "kind": "suite",
        "suite": str(write_suite(root / "suite.jsonl")),
        "rule": "no_regression",
        "concurrency": CONCURRENCY,
    }
    plan_path = workspace.write_plan(
        [
            {"kind": "shadow", "mirror": False, "duration": "1h", "gates": ["tool_args"]},
            {"kind": "full"},
        ],
        pools=pools(stable.url, canary.url),
        gates={"tool_args": suite, "oom": {"kind": "events", "signal": "oom_events"}},
    )
    return db.start_rollout(plan_path)


def test_sigterm_during_a_suite_run_exits_in_time_and_the_next_leader_runs_it_once(
    daemons: Daemons, db: Db, tmp_path: Path, engines: tuple[Engine, Engine]
) -> None:
    """The leader is mid-run (its requests take 30 s); SIGTERM makes it abandon them and exit 0
    well inside 10 s, releasing the job; the standby leads, claims the job and runs the suite
    once: each case asked once of each engine, one stored run per engine, one job."""
    stable, canary = engines
    old, heir = daemons.leader_and_standby()
    rollout = start_suite_rollout(db, tmp_path, stable, canary)
    wait_until(
        lambda: len(canary.asked_by("a")) == CONCURRENCY and len(stable.asked_by("a")),
        WAIT,
        "the leader's suite run to be waiting on the engines",
    )
    job = db.rows("SELECT state, acquired_by, attempts FROM suite_jobs")
    assert [(j["state"], j["attempts"]) for j in job] == [("open", 1)], job

    signalled = time.monotonic()
    assert old.terminate(timeout=10.0) == 0
    exited = time.monotonic() - signalled
    print(f"\nexit after SIGTERM during a suite run: {exited:.2f} s")
    assert exited < SLOW_SECONDS / 3, "the stopping leader waited for its requests"
    late = [at - signalled for at in canary.asked_by("a") + stable.asked_by("a") if at > signalled]
    assert late == [], f"the stopping leader sent requests after SIGTERM: {late}"
    assert old.logged("suite run stopped"), old.log_tail()

    for engine in engines:
        engine.fast.set()
    heir.wait_role("leader", WAIT)
    wait_until(
        lambda: db.scalar("SELECT count(*) FROM suite_jobs WHERE state = 'done'") == 1,
        WAIT,
        "the new leader to finish the suite job",
    )
    verdicts = wait_until(
        lambda: db.rows(
            "SELECT verdict FROM gate_evaluations WHERE rollout_id = :id AND gate = 'tool_args'"
            " AND verdict = 'pass'",
            id=rollout,
        ),
        WAIT,
        "the suite gate to pass on the stored runs",
    )
    assert verdicts
    jobs = db.rows("SELECT id, state, attempts, acquired_by FROM suite_jobs")
    assert len(jobs) == 1 and jobs[0]["state"] == "done" and jobs[0]["attempts"] == 2, jobs
    runs = db.rows("SELECT role, job_id, cases FROM suite_runs ORDER BY role")
    assert [(r["role"], r["job_id"], r["cases"]) for r in runs] == [
        ("baseline", jobs[0]["id"], CASES),
        ("canary", jobs[0]["id"], CASES),
    ]
    assert len(canary.asked_by("b")) == CASES
    assert len(stable.asked_by("b")) == CASES
