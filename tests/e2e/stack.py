"""The whole thing, for real: fleet, HAProxy, Prometheus, agent traffic, Postgres, the daemon.

:class:`Stack` starts a simulated fleet (three stable replicas and one canary, vLLM or
Triton naming) with its agent gateway's exporter and 16 agents in a child process (see
:mod:`tests.e2e.fleet_process`), a real HAProxy in front of the fleet, a real Prometheus
scraping everything every second, and the daemon in a thread with its default drivers -- so
it builds the HAProxy router and the Prometheus source from the plan, as in production.
Closing it stops every one of them, whatever state the test left them in. The e2e tests
and ``bench/breach_to_rollback.py`` share it.

Time is real: a 15 s bake takes 15 s; the simulated engines run 1000x faster than GPUs.
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import structlog
import yaml
from pydantic import SecretStr

from rolloutd.daemon.service import Daemon
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.settings import Settings
from rolloutd.sim.exposition import Flavor
from tests.daemon import helpers
from tests.daemon.helpers import Records
from tests.e2e.fleet_process import FleetProcess
from tests.e2e.services import SCRAPE_INTERVAL_S, FleetHAProxy, PrometheusService
from tests.routers.services import find_binary, free_port, which

CANARY = "gpu-d"

T = TypeVar("T")


def gates(window: str = "30s") -> dict[str, Any]:
    """The e2e plan's gates, calibrated on the simulated fleet under the baseline noise.

    Latency: p95 under 10 s (the happy path has ~2% of requests above 10 s, +50% latency
    puts ~60% there). Rates: the reference plan's bounds, with minimum samples that keep
    1%-of-a-few-hundred noise from firing a trigger. Escalations: the anytime-valid
    canary-vs-stable test at alpha 0.01 (simulated: no false alarm in 1,000 clean steps),
    which waits for 200 events before it may pass.
    """
    return {
        "latency_p95": {
            "kind": "latency",
            "signal": "e2e_latency",
            "target_seconds": 10.0,
            # Generous: the slow-request test then tolerates the canary replica's own load
            # differing from stable's; +50% latency still puts ~60% of requests over 10 s.
            "max_ratio": 1.5,
            "min_samples": 100,
            "window": window,
        },
        "queue_timeouts": {
            "kind": "threshold",
            "signal": "queue_timeout_rate",
            "max": 0.02,
            "min_samples": 200,
            "window": window,
        },
        "schema_violations": {
            "kind": "threshold",
            "signal": "schema_violation_rate",
            "max": 0.008,
            "min_samples": 300,
            "window": window,
        },
        "escalations_not_rising": {
            "kind": "compare",
            "signal": "escalations",
            "alpha": 0.01,
            "min_events": 200,
            "window": window,
        },
        "queue_timeouts_breach": {
            "kind": "threshold",
            "signal": "queue_timeout_rate",
            "max": 0.05,
            "min_samples": 200,
            "window": window,
        },
        "canary_oom": {"kind": "events", "signal": "oom_events", "max_events": 0, "window": window},
        "capacity_assumption": {
            "kind": "capacity",
            "margin": 0.05,
            "kv_usage_max": 0.95,
            "window": window,
        },
        "schema_violations_breach": {
            "kind": "threshold",
            "signal": "schema_violation_rate",
            "max": 0.01,
            "min_samples": 500,
            "window": window,
        },
    }


STEP_GATES = ["latency_p95", "queue_timeouts", "schema_violations", "escalations_not_rising"]
# At 5% the one canary replica carries a sixth of a stable replica's load: latency cannot pass
# there (load-matched judgement), so the 5% step leaves it to the trigger, which still fails a
# canary slower even at that load; the 25% step judges it.
STEP_GATES_AT_5 = [gate for gate in STEP_GATES if gate != "latency_p95"]
# Every fault must end the rollout, so the step gates that judge a fault also act as
# triggers here (a failing step gate alone only holds the step until its deadline).
TRIGGERS = [
    "latency_p95",
    "queue_timeouts_breach",
    "canary_oom",
    "schema_violations_breach",
    "escalations_not_rising",
]


def _on_stderr_now(*_args: object) -> structlog.PrintLogger:
    """A logger on the test's stderr as it is when the line is written (a capture fixture's
    while the test runs, pytest's after it)."""
    return structlog.PrintLogger(sys.stderr)


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    try:
        return helpers.wait_until(predicate, timeout, what, interval=interval)
    except helpers.WaitTimeout as exc:
        raise AssertionError(str(exc)) from None


class Stack(Records):
    """Every service of one e2e run, and what its daemon wrote; use as a context manager
    (``close`` stops them all)."""

    def __init__(
        self,
        database_url: str,
        flavor: Flavor = "triton",
        workdir: Path | None = None,
        topology: str = "reference",
    ):
        super().__init__(database_url)
        self.database_url = database_url
        self.flavor: Flavor = flavor
        self.topology = topology
        self.templates = "vllm" if flavor == "vllm" else "triton-trtllm"
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="rolloutd-e2e-")
        self.dir = workdir or Path(self._tmp.name)  # type: ignore[union-attr]
        self.fleet: FleetProcess | None = None
        self.haproxy: FleetHAProxy | None = None
        self.prometheus: PrometheusService | None = None
        self.daemon: Daemon | None = None
        self._daemon_thread: threading.Thread | None = None
        self.daemon_port = free_port()  # /healthz and /metrics, scraped by Prometheus

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Stack:
        """Start fleet, gateway exporter, HAProxy, Prometheus (targets up) and the traffic."""
        haproxy = find_binary("haproxy")
        prometheus = find_binary("prometheus")
        self.fleet = FleetProcess(self.flavor, self.dir / "fleet.log", self.topology)
        self.haproxy = FleetHAProxy(self.dir, self.fleet.replicas, haproxy)
        self.haproxy.start()
        self.prometheus = PrometheusService(
            self.dir,
            prometheus,
            replicas=self.fleet.replicas,
            gateway_url=self.fleet.gateway_url,
            daemon_port=self.daemon_port,
        )
        self.prometheus.start()
        self.fleet.start_traffic(self.haproxy.url)
        self.prometheus.wait_targets_up()
        return self

    def set_faults(self, replica: str = CANARY, **faults: Any) -> None:
        """Inject faults into a replica (``oom=True`` crashes its engine)."""
        assert self.fleet is not None
        self.fleet.set_faults(replica, **faults)

    def start_daemon(self) -> Daemon:
        """The daemon in a thread, with the default drivers (real HAProxy, real Prometheus),
        logging on stderr as the service does: what a test's ``rolloutctl`` prints on stdout
        is rolloutctl's alone."""
        structlog.configure(logger_factory=_on_stderr_now)
        settings = Settings(database_url=SecretStr(self.database_url), lease_ttl_seconds=10)
        self.daemon = Daemon(settings, loop_seconds=0.2, health_port=self.daemon_port)
        self._daemon_thread = threading.Thread(target=self.daemon.run, name="e2e-rolloutd")
        self._daemon_thread.start()
        return self.daemon

    def close(self) -> None:
        """Stop everything that was started, in reverse order, whatever happened.

        :raises AssertionError: the daemon did not stop within 30 s (its threads are dumped
            to stderr first); every other service is stopped all the same.
        """
        stuck = False
        if self.daemon is not None and self._daemon_thread is not None:
            self.daemon.stopping.set()
            self._daemon_thread.join(timeout=30)
            if self._daemon_thread.is_alive():
                faulthandler.dump_traceback(file=sys.__stderr__)
                stuck = True
            structlog.reset_defaults()
        for service in (self.prometheus, self.haproxy, self.fleet):
            if service is not None:
                service.stop()
        self.engine.dispose()
        if self._tmp is not None:
            self._tmp.cleanup()
        if stuck:
            raise AssertionError("the daemon thread did not stop within 30 s (threads dumped)")

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the rollout ------------------------------------------------------------------------

    def plan(
        self,
        name: str,
        *,
        bakes: tuple[str, str] = ("15s", "15s"),
        max_inconclusive: int = 6,
        gate_overrides: dict[str, dict[str, Any]] | None = None,
        steady: str = "10s",
        through_full: bool = False,
    ) -> dict[str, Any]:
        """A short plan over this stack: canary 5% -> canary 25% -> full -> steady, where
        the capacity watch holds prompt+output p99 to the canary's max_seq_len of 8,192.

        ``through_full``: the rollout is meant to reach 100%, where the one canary replica
        serves all 16 agents -- four times a stable replica's load at 5% -- and the capacity
        model's p95 sits near 10 s; its latency trigger then allows 15 s, as a plan sized for
        a one-replica canary pool would. The faults are judged at 5% and 25%, at 10 s.
        """
        assert self.fleet is not None and self.haproxy is not None and self.prometheus is not None
        all_gates = gates()
        if through_full:
            all_gates["latency_p95"] = {**all_gates["latency_p95"], "target_seconds": 15.0}
        for gate, changes in (gate_overrides or {}).items():
            all_gates[gate] = {**all_gates[gate], **changes}
        pools = {
            pool: {"replicas": [{"name": r.name, "url": r.url} for r in self.fleet.pool(pool)]}
            for pool in ("stable", "canary")
        }
        return {
            "name": name,
            "service": "atlas-70b",
            "environment": "staging",
            "pools": pools,
            "router": self.haproxy.router_spec(),
            "metrics": {
                "source": "prometheus",
                "url": self.prometheus.url,
                "templates": self.templates,
                "pool_label": "pool",
                "model": "atlas-70b",
                "scrape_interval": f"{SCRAPE_INTERVAL_S:g}s",
                "timeout": "2s",
            },
            "artefacts": {"stable": "atlas-70b-msl32768", "canary": "atlas-70b-msl8192"},
            "capacity": {"max_seq_len": 8192, "target_concurrency": 16},
            "interval": "2s",
            "trigger_interval": "1s",
            "limits": {"max_inconclusive": max_inconclusive, "on_inconclusive": "pause"},
            "gates": all_gates,
            "steps": [
                {"kind": "canary", "weight": 5, "bake": bakes[0], "gates": STEP_GATES_AT_5},
                {"kind": "canary", "weight": 25, "bake": bakes[1], "gates": STEP_GATES},
                {"kind": "full"},
                {"kind": "steady", "duration": steady, "gates": ["capacity_assumption"]},
            ],
            "rollback": {"triggers": TRIGGERS},
        }

    def start_rollout(self, plan: dict[str, Any]) -> int:
        """Create the rollout (as ``rolloutctl start`` does); the daemon picks it up."""
        loaded = parse_plan(yaml.safe_dump(plan, sort_keys=False), f"{plan['name']}.yaml")
        with self.sessions.begin() as session:
            return start_rollout(session, loaded, actor="e2e", now=datetime.now(UTC))

    # -- reading back -----------------------------------------------------------------------

    def weight(self) -> int | None:
        """The canary weight HAProxy reports now (None if it cannot be read)."""
        assert self.haproxy is not None
        try:
            return self.haproxy.router().read_weight().weight
        except Exception:
            return None

    def evaluations(self, rollout_id: int, gate: str | None = None) -> list[dict[str, Any]]:
        """The rollout's gate evaluations (of one gate), oldest first."""
        sql = (
            "SELECT gate, role, verdict, value, samples, reason, query, evaluated_at "
            "FROM gate_evaluations WHERE rollout_id = :id"
            + (" AND gate = :gate" if gate else "")
            + " ORDER BY id"
        )
        return self.rows(sql, id=rollout_id, gate=gate)

    def alerts(self, rollout_id: int) -> list[str]:
        """The topics of the alerts the rollout raised."""
        rows = self.rows(
            "SELECT payload FROM actions WHERE rollout_id = :id AND kind = 'alert' ORDER BY id",
            id=rollout_id,
        )
        return [str(r["payload"].get("topic")) for r in rows]

    def wait_verified(self, rollout_id: int, weight: int, timeout: float = 30.0) -> float:
        """Wait until the daemon verified ``weight`` on HAProxy; returns the monotonic time."""

        def verified() -> bool:
            details = [
                e["detail"] for e in self.events(rollout_id) if e["kind"] == "weight_verified"
            ]
            return any(f"reads {weight}%" in d for d in details) and self.weight() == weight

        wait_until(verified, timeout, f"{weight}% verified on HAProxy")
        return time.monotonic()

    def wait_state(self, rollout_id: int, states: set[str], timeout: float) -> str:
        """Wait until the rollout is in one of ``states``; returns it."""
        return wait_until(
            lambda: (s := self.state(rollout_id)) in states and s,
            timeout,
            f"rollout {rollout_id} to reach {sorted(states)} (now {self.state(rollout_id)}; "
            f"events {self.event_kinds(rollout_id)[-6:]})",
        )


@contextlib.contextmanager
def running_stack(database_url: str, flavor: Flavor = "triton") -> Iterator[Stack]:
    """A started :class:`Stack` with its daemon, closed however the block ends."""
    stack = Stack(database_url, flavor)
    try:
        stack.start()
        stack.start_daemon()
        yield stack
    finally:
        stack.close()


def binaries_present() -> bool:
    """Whether prometheus and haproxy are installed (the bench checks before it starts)."""
    return which("prometheus") is not None and which("haproxy") is not None
