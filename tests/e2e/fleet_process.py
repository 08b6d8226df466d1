"""The simulated fleet and its agents in a process of their own.

In production the daemon shares a host with nothing this busy; in one Python process the
16 agent threads and four replica servers would hold the GIL most of the time and slow the
daemon's ticks several-fold. So the e2e tests and the bench run the fleet here:

    python -m tests.e2e.fleet_process FLAVOR [TOPOLOGY]

(TOPOLOGY: ``reference``, three stable replicas and one canary, or ``one-to-one``: gpu-a
stable, gpu-d canary) prints one JSON line ``{"replicas": [{"name", "pool", "url"}, ...],
"gateway": URL}`` and then reads commands, one JSON object a line, from stdin:
``{"traffic": URL}`` starts the agents against URL (HAProxy), ``{"agents": N}`` replaces
them with N agents (load that moves, as a day's does), ``{"stop": true}`` or end of input
stops everything. Faults
go to each replica's admin endpoint (``POST /admin/faults``), as an operator would send them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
TIME_SCALE = 0.001
CONCURRENCY = 16
# Noise every replica has, so the gates judge real rates rather than zeros: 1% queue
# timeouts and 0.3% schema violations; 5% of sessions end with a human anyway.
BASELINE_FAULTS = {"timeout_rate": 0.01, "schema_violation_rate": 0.003}
ESCALATION_BASE = 0.05
# One-turn sessions: the canary's few percent of traffic still yields hundreds of sessions
# a minute for the escalation test to count.
TURNS = 1


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica of the child's fleet, as the parent sees it."""

    name: str
    pool: str
    url: str


class FleetProcess:
    """The parent's handle on the child process."""

    def __init__(self, flavor: str, log: Path, topology: str = "reference") -> None:
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.fleet_process", flavor, topology],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.stop()
            raise AssertionError(f"the fleet process exited; see {log}")
        hello = json.loads(line)
        self.replicas = [ReplicaInfo(**r) for r in hello["replicas"]]
        self.gateway_url: str = hello["gateway"]

    def replica(self, name: str) -> ReplicaInfo:
        """The replica called ``name``."""
        return next(r for r in self.replicas if r.name == name)

    def pool(self, pool: str) -> list[ReplicaInfo]:
        """The replicas of one pool."""
        return [r for r in self.replicas if r.pool == pool]

    def set_faults(self, name: str, **faults: Any) -> None:
        """Change a replica's faults over its admin endpoint (``oom=True`` crashes it)."""
        request = urllib.request.Request(
            f"{self.replica(name).url}/admin/faults",
            data=json.dumps(faults).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200, response.read()

    def start_traffic(self, url: str) -> None:
        """Start the agents against ``url``."""
        self._send({"traffic": url})

    def set_agents(self, count: int) -> None:
        """Replace the agents with ``count`` of them (after ``start_traffic``)."""
        self._send({"agents": count})

    def stop(self) -> None:
        """Stop the agents and the fleet; kill the process if it does not exit in 10 s."""
        if self.process.poll() is None:
            try:
                self._send({"stop": True})
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._log.close()

    def _send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()


def _serve(flavor: str, topology: str, commands: IO[str], out: IO[str]) -> None:
    from rolloutd.sim.fleet import Fleet, ReplicaSpec
    from rolloutd.sim.traffic import EscalationModel, TrafficGenerator, Workload

    if topology == "one-to-one":
        specs = [ReplicaSpec("gpu-a", "stable", flavor), ReplicaSpec("gpu-d", "canary", flavor)]  # type: ignore[arg-type]
        fleet = Fleet(specs, time_scale=TIME_SCALE).start()
    else:
        fleet = Fleet.reference(flavor=flavor, time_scale=TIME_SCALE).start()  # type: ignore[arg-type]
    for replica in fleet.replicas():
        replica.set_faults(**BASELINE_FAULTS)
    traffic: TrafficGenerator | None = None
    url, generation = "", 0

    def agents(count: int) -> TrafficGenerator:
        nonlocal generation
        generation += 1  # new agents start new sessions
        return TrafficGenerator(
            url,
            concurrency=count,
            seed=generation,
            gateway=fleet.gateway,
            workload=Workload(min_turns=TURNS, max_turns=TURNS),
            escalation=EscalationModel(base=ESCALATION_BASE),
            time_scale=TIME_SCALE,
            duration_s=3600,
        ).start()

    try:
        replicas = [{"name": r.name, "pool": r.pool, "url": r.url} for r in fleet.replicas()]
        out.write(json.dumps({"replicas": replicas, "gateway": fleet.gateway.serve()}) + "\n")
        out.flush()
        for line in commands:
            command = json.loads(line)
            if command.get("stop"):
                break
            if "traffic" in command and traffic is None:
                url = command["traffic"]
                traffic = agents(CONCURRENCY)
            if "agents" in command and traffic is not None:
                traffic.stop()
                traffic = agents(int(command["agents"]))
    finally:
        if traffic is not None:
            traffic.stop()
        fleet.stop()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "reference", sys.stdin, sys.stdout)
