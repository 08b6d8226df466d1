"""Running the demo: a real rollout of the reference change on the embedded default.

SQLite in a temp dir, the simulated fleet in-process, the session-hash splitter in front
of it fed by the ``file`` router, the ``simulator`` metrics source, and the real daemon
loop and state machine on a scaled clock. The demo plays the operator only where a
person would: it promotes at the manual-promotion step, as ``rolloutctl promote`` does.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from rolloutd.core.plan import Plan
from rolloutd.daemon.service import Daemon
from rolloutd.demo.clock import ScaledClock
from rolloutd.demo.deployments import DEPLOYMENTS, Deployment
from rolloutd.demo.scenarios import Scenario
from rolloutd.demo.splitter import Splitter
from rolloutd.deploy.base import Executor
from rolloutd.deploy.executors import build_executor
from rolloutd.errors import DatabaseUnavailable
from rolloutd.gates.base import MetricsSource
from rolloutd.operations import start_rollout, submit_command
from rolloutd.planfile import load_plan
from rolloutd.routers.base import Router
from rolloutd.routers.filedriver import FileRouter
from rolloutd.settings import Settings
from rolloutd.sim.fleet import Fleet
from rolloutd.sim.gateway import AgentMetrics
from rolloutd.sim.scoring import parse_arguments, schema_errors
from rolloutd.sim.traffic import TrafficGenerator
from rolloutd.store import queries
from rolloutd.store.db import make_engine, session_factory, transaction, upgrade
from rolloutd.views import history_view, status_view

if TYPE_CHECKING:
    from rolloutd.store.types import Sessions

TERMINAL = ("completed", "rolled_back", "aborted", "failed")


def shadow_scorer(gateway: AgentMetrics) -> Callable[[bytes, int, bytes], None]:
    """Score mirrored answers as a shadow comparator does: tool calls and schema violations.

    Users never see a shadow answer, so there are no sessions or escalations to count; the
    canary's tool calls are still checked against the schemas the request offered.
    """

    def score(request: bytes, status: int, response: bytes) -> None:
        try:
            tools = {
                t["function"]["name"]: t["function"]["parameters"]
                for t in json.loads(request).get("tools", [])
            }
            calls = json.loads(response)["choices"][0]["message"].get("tool_calls") or []
        except (ValueError, KeyError, IndexError, TypeError):
            return
        for call in calls:
            function = call.get("function", {})
            gateway.add("canary", "tool_calls")
            arguments = parse_arguments(function.get("arguments", ""))
            schema = tools.get(function.get("name"))
            if arguments is None or schema is None or schema_errors(arguments, schema):
                gateway.add("canary", "schema_violations")

    return score


class DemoDrivers:
    """The file router the splitter reads, and the fleet's own counters as metrics."""

    def __init__(self, weights: Path, metrics: MetricsSource) -> None:
        self._router = FileRouter(weights)
        self._metrics = metrics

    def router(self, rollout_id: int, plan: Plan) -> Router:
        return self._router

    def metrics(self, rollout_id: int, plan: Plan) -> MetricsSource:
        return self._metrics

    def executor(self, rollout_id: int, plan: Plan) -> Executor:
        return build_executor(plan)

    def forget(self, rollout_id: int) -> None:
        """The demo's router and metrics serve every rollout it runs."""


@dataclass
class DemoResult:
    """What happened, for the summary and ``--output json``."""

    scenario: str
    expected: str
    state: str
    weight: int
    wall_seconds: float
    rollout_id: int
    deployment: str = "atlas-70b"
    fault_at: str | None = None
    rollback_cause: str | None = None
    commands: list[str] = field(default_factory=list)
    traffic: dict[str, dict[str, int]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    report: str | None = None
    database: str | None = None
    plan: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the rollout ended as the scenario expects."""
        return self.state == self.expected

    def as_json(self) -> dict[str, Any]:
        """The summary as one JSON object: whether it went as expected, then every field."""
        return {"ok": self.ok, **asdict(self), "wall_seconds": round(self.wall_seconds, 2)}


Observer = Callable[[dict[str, Any], str | None], None]


def prepare_artefacts(
    sessions: Sessions,
    plan: Plan,
    directory: Path,
    *,
    now: datetime,
    deployment: Deployment = DEPLOYMENTS["atlas-70b"],
) -> None:
    """Pin the plan's two artefact sets (small stand-in engine directories, with the
    deployment's engine configurations) and deploy the canary set on the canary replica,
    as an operator does before ``rolloutctl start``."""
    from rolloutd.deploy.catalog import build_set, pin
    from rolloutd.deploy.executors import build_executor

    built = {}
    for name in (plan.artefacts.stable, plan.artefacts.canary):
        root = directory / name
        (root / "tokenizer").mkdir(parents=True, exist_ok=True)
        (root / "config.json").write_text(json.dumps(deployment.sets[name]))
        (root / "rank0.engine").write_bytes(name.encode() * 4096)
        (root / "tokenizer" / "tokenizer.json").write_text('{"vocab": 128256}')
        config = deployment.sets[name]
        built[name] = build_set(name, root, deployment.engine, config, created_by="demo")
    with transaction(sessions) as session:
        for pinned in built.values():
            pin(session, pinned, now=now)
    executor = build_executor(plan)
    for replica in plan.pools.canary.replicas:
        result = executor.deploy(replica, built[plan.artefacts.canary])
        if not result.ok:
            raise RuntimeError(f"the demo could not deploy its canary set: {result.reason}")


def run_demo(
    scenario: Scenario,
    *,
    speed: float,
    seed: int = 0,
    deployment: Deployment = DEPLOYMENTS["atlas-70b"],
    concurrency: int | None = None,
    timeout_s: float = 120.0,
    observe: Observer | None = None,
    workdir: Path | None = None,
) -> DemoResult:
    """Run one scenario on ``deployment`` to its end (or ``timeout_s``) and report what
    happened; ``concurrency``: agent sessions at once (default: the deployment's)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rolloutd-demo-") as tmp:
        root = workdir or Path(tmp)
        url = f"sqlite:///{root / 'rolloutd.db'}"
        upgrade(url)
        fleet = deployment.fleet(seed).start()
        weights = root / "weights.json"
        splitter = Splitter(
            weights,
            {
                "stable": list(fleet.urls("stable").values()),
                "canary": list(fleet.urls("canary").values()),
            },
            on_shadow=shadow_scorer(fleet.gateway),
        ).start()
        traffic = TrafficGenerator(
            splitter.url,
            concurrency=concurrency or deployment.agents,
            model=deployment.model,
            workload=deployment.workload,
            gateway=fleet.gateway,
            time_scale=fleet.time_scale,
            seed=seed,
        ).start()
        clock = ScaledClock(speed)
        daemon = Daemon(
            Settings(database_url=SecretStr(url), instance_name="demo"),
            drivers=DemoDrivers(weights, fleet.metrics()),
            clock=clock,
            loop_seconds=0.1,
            health_port=0,
        )
        engine = make_engine(url)
        sessions = session_factory(engine)
        try:
            plan_path = root / f"{deployment.name}-demo.yaml"
            plan_path.write_text(deployment.plan(weights, fleet.urls()))
            loaded = load_plan(plan_path)
            artefacts = root / "artefacts"
            prepare_artefacts(sessions, loaded.plan, artefacts, now=clock(), deployment=deployment)
            with transaction(sessions) as session:
                rollout_id = start_rollout(session, loaded, actor="demo", now=clock())
            thread = threading.Thread(target=daemon.run, name="rolloutd-demo", daemon=True)
            thread.start()
            watched = _Watched(deployment, scenario, fleet, clock)
            result = _drive(sessions, rollout_id, watched, started, timeout_s, observe)
        finally:
            daemon.stopping.set()
            report = traffic.stop()
            splitter.stop()
            fleet.stop()
        thread.join(timeout=15)
        with transaction(sessions) as session:
            result.events = history_view(session, rollout_id)
            if workdir is not None:
                # Kept for the operator: the page of the rollout, beside its database.
                from rolloutd.web.pages import rollout_html

                report_path = root / f"report-{rollout_id}.html"
                report_path.write_text(
                    rollout_html(session, rollout_id, now=clock(), report=True), encoding="utf-8"
                )
                result.report, result.database = str(report_path), url
                result.plan = str(plan_path)
        engine.dispose()
        result.traffic = {
            pool: {
                "sessions": t.sessions,
                "requests": t.requests,
                "timeouts": t.timeouts,
                "schema_violations": t.schema_violations,
                "escalations": t.escalations,
            }
            for pool, t in report.pools.items()
        }
        result.wall_seconds = time.monotonic() - started
        result.weight = FileRouter(weights).read_weight().weight
        return result


@dataclass(frozen=True)
class _Watched:
    """What the demo watches and acts on: the deployment, its fleet, the scenario, the clock."""

    deployment: Deployment
    scenario: Scenario
    fleet: Fleet
    clock: ScaledClock


def _drive(
    sessions: Any,
    rollout_id: int,
    watched: _Watched,
    started: float,
    timeout_s: float,
    observe: Observer | None,
) -> DemoResult:
    """Watch the rollout, inject the fault when its step comes, promote when asked."""
    scenario, clock = watched.scenario, watched.clock
    fault_at: str | None = None
    commands: list[str] = []
    promoted = False
    while True:
        try:
            with transaction(sessions) as session:
                view = status_view(session, queries.get_rollout(session, rollout_id))
        except DatabaseUnavailable:
            # SQLite queues every transaction for its one write lock; while the daemon
            # stores a large suite run the watcher may wait out the busy timeout: look again.
            if time.monotonic() - started > timeout_s:
                raise
            time.sleep(0.1)
            continue
        note = None
        if fault_at is None and scenario.inject and (view["weight"] or 0) >= scenario.at_weight:
            scenario.apply(watched.fleet, watched.deployment.canary)
            fault_at = view["step_name"]
            note = f"fault injected at {fault_at}: {scenario.description}"
        if view["state"] == "awaiting_promotion" and not promoted:
            reason = "25% looked clean for 48h"
            with transaction(sessions) as session:
                submit_command(
                    session,
                    rollout_id,
                    "promote",
                    actor="demo",
                    reason=reason,
                    now=clock(),
                )
            commands.append(f'rolloutctl promote {rollout_id} --reason "{reason}"')
            promoted = True
            note = f"operator: promote ({reason})"
        if observe is not None:
            observe(view, note)
        if view["state"] in TERMINAL or time.monotonic() - started > timeout_s:
            return DemoResult(
                scenario=scenario.name,
                expected=scenario.expected,
                deployment=watched.deployment.name,
                state=view["state"],
                weight=view["weight"],
                wall_seconds=time.monotonic() - started,
                rollout_id=rollout_id,
                fault_at=fault_at,
                rollback_cause=view.get("rollback_cause"),
                commands=commands,
            )
        time.sleep(0.1)
