"""How long from a breach to the canary verified back on the pinned stable set.

    python3 bench/rollback_to_pinned.py [--breaches 10] [--trigger-interval 0.2]

The daemon (its real loop, default drivers) drives a rollout of a plan on the ``file``
router and ``file`` metrics whose canary replica is a simulated Triton engine (model
control over HTTP, loads taking 20 simulated seconds, i.e. 20 ms at the fleet's 1000x). Each
round pins the two artefact sets on a fresh SQLite database, deploys the canary set, starts
the rollout, waits for 10% on the router, then writes an OOM into the metrics file and
times, on the wall clock, the rollback's steps as the audit log records them:

- breach -> ``rollback_started`` (the trigger tick that saw it),
- -> the router file reading 0% (the weight action, read back),
- -> ``artefacts_deployed`` (the stable set loaded through Triton's repository API),
- -> ``replica_verified`` (health, engine config, version and digest checked).

Ticks of the trigger gates come every ``--trigger-interval`` seconds; each later step
waits for the next tick, so the total is about four ticks plus the engine's load time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rolloutd.daemon.service import Daemon
from rolloutd.deploy.catalog import build_set, pin
from rolloutd.deploy.executors import build_executor
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.settings import Settings
from rolloutd.sim.engine import Replica as SimReplica
from rolloutd.store import queries
from rolloutd.store.db import make_engine, session_factory, upgrade

CONFIGS = {
    "build-old": {"max_seq_len": 32768, "kv_cache_free_gpu_mem_fraction": 0.9},
    "build-new": {"max_seq_len": 8192, "kv_cache_free_gpu_mem_fraction": 0.9},
}
STEPS = ("rollback_started", "weight 0", "artefacts_deployed", "replica_verified")


def plan_yaml(replica_url: str, weights: Path, metrics: Path, interval: float) -> str:
    """A one-step plan with the OOM trigger and the triton executor."""
    return yaml.safe_dump(
        {
            "name": "bench-rollback",
            "service": "atlas-70b",
            "environment": "staging",
            "pools": {
                "stable": {"replicas": [{"name": "s1", "url": "http://127.0.0.1:9"}]},
                "canary": {"replicas": [{"name": "c1", "url": replica_url}]},
            },
            "router": {"driver": "file", "path": str(weights)},
            "metrics": {"source": "file", "path": str(metrics)},
            "artefacts": {"stable": "build-old", "canary": "build-new"},
            "executor": {
                "kind": "triton",
                "model": "atlas-70b",
                "versions": {"stable": 1, "canary": 3},
                "poll_interval": "20ms",
                "health_deadline": "10s",
            },
            "interval": f"{int(interval * 1000)}ms",
            "trigger_interval": f"{int(interval * 1000)}ms",
            "gates": {"oom": {"kind": "events", "signal": "oom_events", "window": "1m"}},
            "steps": [{"kind": "canary", "weight": 10, "bake": "1h"}, {"kind": "full"}],
            "rollback": {"triggers": ["oom"]},
        }
    )


def one_round(directory: Path, replica: SimReplica, interval: float) -> dict[str, float]:
    """One rollout, one breach; seconds from the breach to each step of the rollback."""
    url = f"sqlite:///{directory / 'rolloutd.db'}"
    upgrade(url)
    weights, metrics = directory / "weights.json", directory / "metrics.json"
    metrics.write_text(json.dumps({"oom_events": {"canary": {"value": 0}}}))
    loaded = parse_plan(plan_yaml(replica.url, weights, metrics, interval), "bench.yaml")
    engine = make_engine(url)
    sessions = session_factory(engine)
    sets = {}
    for name, config in CONFIGS.items():
        root = directory / name
        root.mkdir()
        (root / "rank0.engine").write_bytes(name.encode() * 100_000)
        (root / "config.json").write_text(json.dumps(config))
        sets[name] = build_set(name, root, "trtllm", config)
    now = datetime.now(UTC)
    with sessions.begin() as session:
        for pinned in sets.values():
            pin(session, pinned, now=now)
        rollout_id = start_rollout(session, loaded, actor="bench", now=now)
    assert (
        build_executor(loaded.plan)
        .deploy(loaded.plan.pools.canary.replicas[0], sets["build-new"])
        .ok
    )
    daemon = Daemon(
        Settings(database_url=SecretStr(url), instance_name="bench"),
        loop_seconds=interval / 2,
        health_port=0,
    )
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        _wait(lambda: _weight(weights) == 10, 30, "10% on the router")
        time.sleep(interval * 0.37)  # land the breach somewhere inside a tick cycle
        metrics.write_text(json.dumps({"oom_events": {"canary": {"value": 1}}}))
        breach = time.time()
        _wait(lambda: _weight(weights) == 0, 30, "0% on the router")
        zero = time.time()
        _wait(lambda: _state(sessions, rollout_id) == "rolled_back", 60, "rolled_back")
        with sessions.begin() as session:
            at = {e.kind: e.at.timestamp() for e in queries.list_events(session, rollout_id)}
    finally:
        daemon.stopping.set()
        thread.join(timeout=15)
        engine.dispose()
    assert replica.config.max_seq_len == 32768, "the canary is not back on the stable set"
    return {
        "rollback_started": at["rollback_started"] - breach,
        "weight 0": zero - breach,
        "artefacts_deployed": at["artefacts_deployed"] - breach,
        "replica_verified": at["replica_verified"] - breach,
    }


def _weight(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["canary_weight"])
    except (OSError, ValueError, KeyError):
        return None


def _state(sessions: object, rollout_id: int) -> str:
    with sessions.begin() as session:  # type: ignore[attr-defined]
        return str(queries.get_rollout(session, rollout_id).state)


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--breaches", type=int, default=10)
    parser.add_argument("--trigger-interval", type=float, default=0.2)
    args = parser.parse_args()
    rounds = []
    with SimReplica("c1", pool="canary", time_scale=1e-3) as replica:
        for i in range(args.breaches):
            with tempfile.TemporaryDirectory(prefix="rolloutd-bench-") as tmp:
                rounds.append(one_round(Path(tmp), replica, args.trigger_interval))
            print(
                f"  breach {i + 1}: verified after {rounds[-1]['replica_verified']:.2f} s",
                file=sys.stderr,
            )
    tick = args.trigger_interval
    print(f"\n{args.breaches} breaches, trigger ticks every {tick:g} s\n")
    print("| from the breach to | median s | max s | median, ticks |")
    print("|---|---|---|---|")
    for step in STEPS:
        values = [r[step] for r in rounds]
        median = statistics.median(values)
        print(f"| {step} | {median:.2f} | {max(values):.2f} | {median / tick:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
