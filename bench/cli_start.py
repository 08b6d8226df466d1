"""How fast ``rolloutctl status ID`` and ``rolloutctl list`` start on a database of many rollouts.

    python3 bench/cli_start.py [--rollouts 1000] [--runs 10] [--output table|json]
                               [--database-url postgresql:///postgres]

Fills an SQLite file (and, with ``--database-url``, a scratch database made on that Postgres
server, dropped at the end) with N rollouts as ``rolloutctl start`` and the daemon write them:
the reference plan (``config/plans/atlas-70b-maxseq8192.yaml``: Prometheus metrics, six steps,
thirteen gates), each with its own name and service, so no two share a parsed plan; most of
them ended (completed, or rolled back at 5%), every tenth running at 25% with 50 verdicts of
each of its nine gates, and the step rows the daemon records as a rollout enters a step.
Then it times cold runs of each command, a new interpreter every time, round-robin so that a
slow moment of the machine hits every command alike:

- ``python -c 'import sqlalchemy'``: the baseline; no rolloutctl command can start faster;
- ``rolloutctl status ID`` (the newest rollout, a running one) as a table and as JSON;
- ``rolloutctl list`` (its default: the 50 newest).

It prints the median wall time of each, in ms and as a ratio to the baseline measured in the
same run. To compare two trees, run each tree's copy of this script with ``PYTHONPATH`` set
to that tree (the commands inherit it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench._common

from bench._common import scratch_database
from rolloutd.core.plan import Plan
from rolloutd.core.progress import Desired, Progress, RollbackFacts
from rolloutd.operations import start_rollout
from rolloutd.planfile import LoadedPlan, content_hash, parse_plan
from rolloutd.store import queries
from rolloutd.store.db import make_engine, session_factory, transaction, upgrade
from rolloutd.store.evaluations import NewEvaluation

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "plans" / "atlas-70b-maxseq8192.yaml"
RUNNING_EVERY = 10
"""Every tenth rollout is still running (at its 25% step); the others have ended."""
RUNNING_STEP = 2
EVALUATIONS_PER_GATE = 50


def plans(count: int) -> Iterator[LoadedPlan]:
    """The reference plan (Prometheus metrics, six steps, thirteen gates) ``count`` times, each
    of its own name and service. It is checked in full once: checking its metric templates
    takes longer than storing a rollout."""
    text = EXAMPLE.read_text()
    reference = parse_plan(text, str(EXAMPLE))
    for i in range(count):
        name = f"bench-{i:05d}"
        own = re.sub(r"^name: .*$", f"name: {name}", text, count=1, flags=re.M)
        own = re.sub(r"^service: .*$", f"service: {name}", own, count=1, flags=re.M)
        plan = reference.plan.model_copy(update={"name": name, "service": name})
        yield LoadedPlan(plan, f"{name}.yaml", own, content_hash(plan))


def progress_of(plan: Plan, i: int, created: datetime, running: bool) -> tuple[Progress, str, int]:
    """What the daemon would have written for rollout ``i`` by now: progress, state, and the
    index of the step it is in."""
    started = created + timedelta(seconds=5)
    if running:
        entered = started + timedelta(hours=72)
        progress = Progress(
            started_at=started,
            step_index=RUNNING_STEP,
            step_entered_at=entered,
            step_verified_at=entered + timedelta(seconds=2),
            baked_seconds=600.0,
            bake_mark=entered + timedelta(minutes=10),
            desired=Desired(plan.step_weight(RUNNING_STEP), False, RUNNING_STEP + 1),
        )
        return progress, "running", RUNNING_STEP
    if i % 7 == 3:
        cause = "gate canary_oom breached: 1 event on gpu-d"
        at = started + timedelta(hours=30)
        facts = RollbackFacts(cause, at, "canary_oom", "verify", (), "trigger")
        progress = Progress(
            started_at=started,
            step_index=1,
            rollback=facts,
            desired=Desired(0, False, 3),
            ended="rolled_back",
            ended_at=at + timedelta(minutes=5),
        )
        return progress, "rolled_back", 1
    last = len(plan.steps) - 1
    progress = Progress(
        started_at=started,
        step_index=last,
        desired=Desired(100, False, last + 1),
        ended="completed",
        ended_at=started + timedelta(days=12),
    )
    return progress, "completed", last


def record_steps(session: Session, rollout_id: int, plan: Plan, last: int, at: datetime) -> None:
    """The step rows the daemon writes as a rollout enters each step, up to step ``last``."""
    for index in range(last + 1):
        step = plan.steps[index]
        queries.upsert_step(
            session,
            rollout_id=rollout_id,
            step_index=index,
            name=step.title(),
            kind=step.kind,
            weight=float(plan.step_weight(index)),
            entered_at=at,
        )


def evaluations(rollout_id: int, plan: Plan, since: datetime) -> list[NewEvaluation]:
    """A running rollout's gate verdicts at its step, one every 30 s per gate."""
    step_gates = plan.gates_of(RUNNING_STEP)
    found: list[NewEvaluation] = []
    for gate in [*step_gates, *plan.rollback.triggers]:
        for n in range(EVALUATIONS_PER_GATE):
            found.append(
                NewEvaluation(
                    rollout_id=rollout_id,
                    step_index=RUNNING_STEP,
                    gate=gate,
                    role="step" if gate in step_gates else "trigger",
                    verdict="pass",
                    value=0.001 * (n % 5),
                    threshold="<= 0.01",
                    query=None,
                    samples=5000,
                    statistic=None,
                    reason="within the threshold",
                    evidence={},
                    evaluated_at=since + timedelta(seconds=30 * n),
                )
            )
    return found


def fill(url: str, count: int) -> int:
    """Write ``count`` rollouts to the database at ``url``; return the newest one's id."""
    engine = make_engine(url)
    sessions = session_factory(engine)
    newest = 0
    first = datetime.now(UTC) - timedelta(days=count // 10 + 30)
    try:
        with transaction(sessions) as session:
            for i, loaded in enumerate(plans(count)):
                # The newest is the one `status ID` shows: a running one.
                running = i % RUNNING_EVERY == RUNNING_EVERY - 1 or i == count - 1
                created = first + timedelta(hours=2 * i)
                newest = start_rollout(session, loaded, actor="bench", now=created)
                progress, state, last = progress_of(loaded.plan, i, created, running)
                updated = created + timedelta(hours=1)
                queries.save_progress(
                    session,
                    queries.get_rollout(session, newest),
                    progress=progress.for_storage(),
                    state=state,
                    active=running,
                    now=updated,
                )
                record_steps(session, newest, loaded.plan, last, updated)
                if running:
                    found = evaluations(newest, loaded.plan, updated)
                    queries.record_evaluations(session, found)
    finally:
        engine.dispose()
    return newest


def cold_runs(commands: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, float]:
    """The median wall time of ``runs`` runs of each command, in seconds, taken round-robin
    after one round that is not counted (it writes the bytecode caches and warms the disk)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs + 1):
        for name, args in commands.items():
            started = time.perf_counter()
            done = subprocess.run(args, env=env, capture_output=True, check=False)
            times[name].append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr.decode()}")
    return {name: statistics.median(values[1:]) for name, values in times.items()}


def measure(url: str, count: int, runs: int) -> dict[str, float]:
    """Fill the database at ``url`` and time the commands on it."""
    newest = fill(url, count)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTD_")}
    env.update(ROLLOUTD_DATABASE_URL=url, ROLLOUTD_ENV_FILE="/nonexistent")
    # An operator's rolloutctl starts from cached bytecode; compiling every module would
    # count the compiler, not the start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = {
        "python -c 'import sqlalchemy'": [sys.executable, "-c", "import sqlalchemy"],
        f"rolloutctl status {newest}": ["rolloutctl", "status", str(newest)],
        "rolloutctl list": ["rolloutctl", "list"],
        f"rolloutctl status {newest} -o json": ["rolloutctl", "status", str(newest), "-o", "json"],
    }
    return cold_runs(commands, env, runs)


@contextmanager
def sqlite_database(workdir: Path) -> Iterator[str]:
    """A new SQLite file at the newest schema, its URL."""
    url = f"sqlite:///{workdir / 'bench.db'}"
    upgrade(url)
    yield url


def report(results: dict[str, dict[str, float]], count: int, runs: int) -> None:
    """One row per command, a median and a ratio to the baseline per database."""
    databases = list(results)
    print(f"{count:,} rollouts; median of {runs} cold runs each")
    print()
    print("| command | " + " | ".join(f"{db} | ratio" for db in databases) + " |")
    print("|---" + "|---:" * (2 * len(databases)) + "|")
    for i, name in enumerate(next(iter(results.values()))):
        cells = []
        for db in databases:
            values = list(results[db].values())
            cells += [f"{values[i] * 1000:.0f} ms", f"{values[i] / values[0]:.2f}x"]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="rollouts in the database")
    parser.add_argument("--runs", type=int, default=10, help="cold runs of each command")
    parser.add_argument("--output", choices=["table", "json"], default="table")
    parser.add_argument(
        "--database-url",
        help="also measure on Postgres: a scratch database is made on this URL's server",
    )
    args = parser.parse_args()
    if args.rollouts < 1 or args.runs < 1:
        parser.error("--rollouts and --runs must be positive")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="rolloutd-cli-start-") as tmp:
        workdir = Path(tmp)
        with sqlite_database(workdir) as url:
            results["sqlite"] = measure(url, args.rollouts, args.runs)
        if args.database_url:
            with scratch_database(args.database_url) as url:
                results["postgres"] = measure(url, args.rollouts, args.runs)
    if args.output == "json":
        print(json.dumps({"rollouts": args.rollouts, "runs": args.runs, **results}, indent=2))
    else:
        report(results, args.rollouts, args.runs)


if __name__ == "__main__":
    main()
