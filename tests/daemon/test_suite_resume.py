"""A suite run survives its holder's death: a leader SIGKILLed mid-run leaves each finished
case's result in Postgres, and the next leader asks only the cases without one, then judges
the runs exactly as an uninterrupted run is judged."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from rolloutd.core.plan import SuiteGate
from rolloutd.evaluation.runner import RunnerOptions
from rolloutd.evaluation.schedule import run_suite_for_gate
from rolloutd.httpserve import QuietServer
from rolloutd.planfile import load_plan
from tests.plans import pools
from tests.store.seed import seed_rollout

from .helpers import WAIT, Daemons, Db, Workspace, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CASES = 40
CONCURRENCY = 2
PACE_SECONDS = 0.25  # each answer: a 40-case run takes 5 s a pool
WRONG_EVERY = 4  # the canary names the wrong city in every 4th case
_CASE = re.compile(r"\((\d+)\)")


class Engine:
    """An OpenAI-compatible chat endpoint answering each case after ``pace`` seconds (the
    canary: wrong in every :data:`WRONG_EVERY`-th case); it records which instance asked
    which case."""

    def __init__(self, *, wrong: bool) -> None:
        self.pace = PACE_SECONDS
        self.lock = threading.Lock()
        self.asked: list[tuple[str, int]] = []  # (User-Agent, case number)
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer({"object": "list", "data": [{"id": "atlas-70b"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                found = _CASE.search(body["messages"][0]["content"])
                assert found is not None
                number = int(found.group(1))
                with engine.lock:
                    engine.asked.append((self.headers.get("User-Agent", ""), number))
                time.sleep(engine.pace)
                city = "Lyon" if wrong and number % WRONG_EVERY == 0 else "Paris"
                call = {"name": "get_weather", "arguments": json.dumps({"city": city})}
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
                    pass  # the client died

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def cases_asked(self, instance: str | None = None) -> Counter[int]:
        """How often each case was asked (by rolloutd ``instance``, or by anyone)."""
        with self.lock:
            return Counter(
                number
                for agent, number in self.asked
                if instance is None or agent == f"rolloutd ({instance})"
            )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engines() -> Iterator[tuple[Engine, Engine]]:
    """(stable, canary): stable always right, the canary wrong in a quarter of the cases."""
    pair = Engine(wrong=False), Engine(wrong=True)
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
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"weather-{n:02d}",
                    "messages": [{"role": "user", "content": f"Weather in Paris? ({n})"}],
                    "tools": [tool],
                    "expected": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            )
            + "\n"
            for n in range(CASES)
        )
    )
    return path


def suite_plan(root: Path, stable: Engine, canary: Engine) -> Path:
    """A plan whose shadow step waits on the suite gate, against the two engines."""
    suite = {
        "kind": "suite",
        "suite": str(write_suite(root / "suite.jsonl")),
        "rule": "no_regression",
        "concurrency": CONCURRENCY,
    }
    return Workspace(root, "resume").write_plan(
        [
            {"kind": "shadow", "mirror": False, "duration": "1h", "gates": ["tool_args"]},
            {"kind": "full"},
        ],
        pools=pools(stable.url, canary.url),
        gates={"tool_args": suite, "oom": {"kind": "events", "signal": "oom_events"}},
    )


def kept(db: Db, role: str) -> int:
    return int(db.scalar("SELECT count(*) FROM suite_job_cases WHERE role = :role", role=role))


def test_a_run_whose_leader_was_killed_continues_on_the_next_leader_with_the_same_verdict(
    daemons: Daemons, db: Db, tmp_path: Path, engines: tuple[Engine, Engine]
) -> None:
    """The leader is SIGKILLed a third into the run; the standby leads, claims the job once
    the dead holder's claim is over, and asks only the cases without a kept result: each
    case reached each engine once, plus at most one per worker that was in flight at the
    kill. The stored runs and the gate's verdict are those of an uninterrupted run."""
    stable, canary = engines
    old, heir = daemons.leader_and_standby()
    plan_path = suite_plan(tmp_path, stable, canary)
    rollout = db.start_rollout(plan_path)
    wait_until(
        lambda: kept(db, "canary") >= CASES // 3 and kept(db, "baseline") >= CASES // 3,
        WAIT,
        "a third of the cases to be kept",
    )
    old.kill()
    asked_by_old = {"stable": stable.cases_asked("a"), "canary": canary.cases_asked("a")}
    at_kill = {role: kept(db, role) for role in ("baseline", "canary")}
    # As waiting out the dead leader's lease and its claim would (the claim reaches past a
    # request's 60 s timeout, which the store tests and the reconciler tests cover).
    db.expire_lease()
    db.execute(
        "UPDATE suite_jobs SET acquired_until = :past WHERE state = 'open'",
        past=datetime.now(UTC) - timedelta(seconds=1),
    )
    heir.wait_role("leader", WAIT)
    wait_until(
        lambda: db.scalar("SELECT count(*) FROM suite_jobs WHERE state = 'done'") == 1,
        2 * WAIT,
        "the new leader to finish the suite job",
    )
    verdict = wait_until(
        lambda: db.rows(
            "SELECT verdict, reason FROM gate_evaluations WHERE rollout_id = :id"
            " AND gate = 'tool_args' AND verdict <> 'pending' ORDER BY id DESC LIMIT 1",
            id=rollout,
        ),
        WAIT,
        "the suite gate to be judged on the stored runs",
    )[0]

    jobs = db.rows("SELECT id, name, state, attempts, acquired_by FROM suite_jobs")
    assert (
        len(jobs) == 1 and jobs[0]["attempts"] == 2 and jobs[0]["acquired_by"].startswith("b/")
    ), jobs
    assert jobs[0]["name"] == f"rollout-{rollout}/tool_args/step-0/run-1"
    assert db.scalar("SELECT count(*) FROM suite_job_cases") == 0  # forgotten once stored
    print(f"\nkept at the kill: {at_kill}")
    for pool, engine in (("stable", stable), ("canary", canary)):
        asked = engine.cases_asked()
        again = sorted(n for n, times in asked.items() if times > 1)
        print(f"{pool}: {sum(asked.values())} requests for {CASES} cases; asked again: {again}")
        assert sorted(asked) == list(range(CASES)), f"{pool} missed cases"
        assert max(asked.values()) <= 2
        assert all(n in asked_by_old[pool] for n in again), "re-asked a case the dead never had"
        assert len(again) <= CONCURRENCY, f"{pool} re-asked more than the cases in flight"

    # The same suite, uninterrupted, against the same engines: the same cases and verdict.
    for engine in engines:
        engine.pace = 0.0
    plan = load_plan(plan_path).plan
    spec = plan.gates["tool_args"]
    assert isinstance(spec, SuiteGate)
    with db.session() as session:
        other = seed_rollout(session, service="uninterrupted")
    reference = run_suite_for_gate(
        db.sessions,
        plan=plan,
        spec=spec,
        name="tool_args",
        role="step",
        rollout_id=other,
        step_index=0,
        now=datetime.now(UTC),
        options=RunnerOptions(concurrency=CONCURRENCY),
    )
    assert (verdict["verdict"], verdict["reason"]) == (reference.verdict.value, reference.reason)
    assert verdict["verdict"] == "fail"  # the canary's wrong cities, found
    cases = (
        "SELECT r.role, c.case_id, c.outcome, c.exact FROM suite_case_results c"
        " JOIN suite_runs r ON r.id = c.run_id WHERE r.rollout_id = :id ORDER BY r.role, c.position"
    )
    assert db.rows(cases, id=rollout) == db.rows(cases, id=other)
