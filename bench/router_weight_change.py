"""What one weight change costs on each router driver, and the split it really produces.

    python3 bench/router_weight_change.py [--changes 100] [--sessions 2000]

Starts two small HTTP pools, a real haproxy and a real nginx on 127.0.0.1 (the test
suite's services, in a temporary directory), and times one weight change as the reconciler
performs it: ``set_weight`` then a verified ``read_weight``, alternating 5% and 25% so every
change is real. The file driver (a JSON file, no load balancer) is the baseline of the ratio
column. Then it sends ``--sessions`` distinct session ids through each proxy at 5% and 25%,
prints how many reached the canary against the binomial 99.9% range, and checks that every
session on the canary at 5% is still there at 25%.

HAProxy changes weights over its runtime API; NGINX has no such API, so a change there is a
rendered include, ``nginx -T``, ``nginx -s reload``, and the wait for the old workers to stop
accepting (the master gives them 100 ms) -- that wait dominates its figure.

The LiteLLM proxy (when installed, see .ci/run; two simulated vLLM replicas behind it) gets a
weights file its rolloutd plugin re-reads, verified at the plugin's read-back. Its split is
``--turns`` turns of each session through the plugin's own pick on the weights the proxy
applies, plus ``--sample`` real requests through the proxy that must land where the pick says
(a real request costs tens of milliseconds of the proxy's Python; 30,000 would take minutes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' service helpers

from rolloutd.routers.base import Router
from rolloutd.routers.filedriver import FileRouter
from rolloutd.routers.litellm_pools import SessionPools, WeightsDirectory
from tests.routers.litellm_service import DEPLOYMENTS, GROUP, LiteLLMService
from tests.routers.services import (
    HAProxyService,
    NginxService,
    Pools,
    binomial_interval,
    route,
    session_ids,
    which,
)


def time_changes(router: Router, changes: int) -> list[float]:
    """Seconds per change (set, then read back and verify), alternating 5% and 25%."""
    router.set_weight(25)
    timings = []
    for i in range(changes):
        weight = 5 if i % 2 == 0 else 25
        started = time.perf_counter()
        router.set_weight(weight)
        if router.read_weight().weight != weight:
            raise SystemExit(f"{type(router).__name__} did not read back {weight}%")
        timings.append(time.perf_counter() - started)
    router.set_weight(0)
    return timings


def measure_split(service: HAProxyService | NginxService, sessions: list[str]) -> list[str]:
    """Rows of the split table for one proxy."""
    router = service.router()
    canary: dict[int, set[str]] = {}
    rows = []
    for weight in (5, 25):
        router.set_weight(weight)
        answers = route(service.port, sessions)
        canary[weight] = {s for s, pool in zip(sessions, answers, strict=True) if pool == "canary"}
        low, high = binomial_interval(len(sessions), weight / 100)
        inside = "yes" if low <= len(canary[weight]) <= high else "NO"
        rows.append(
            f"| {type(service).__name__.removesuffix('Service'):8} | {weight:3}% "
            f"| {len(canary[weight]):6} | {low:4}-{high:<4} | {inside:6} |"
        )
    moved_back = len(canary[5] - canary[25])
    rows.append(f"| sessions on the canary at 5% and not at 25%: {moved_back} |")
    router.set_weight(0)
    return rows


def litellm_turns(service: LiteLLMService, sessions: list[str], turns: int) -> dict[str, set[str]]:
    """The pools each session's turns were picked for by the plugin's code, turn by turn."""
    pools = SessionPools(WeightsDirectory(service.weights_dir))
    deployments = [
        {"model_name": GROUP, "litellm_params": {}, "model_info": {"id": i, "rolloutd_pool": p}}
        for i, p in DEPLOYMENTS.items()
    ]
    seen: dict[str, set[str]] = {s: set() for s in sessions}
    for _ in range(turns):
        for session in sessions:
            kwargs = {"metadata": {"headers": {"x-session-id": session}}}
            seen[session].add(pools.pick(GROUP, deployments, kwargs)[0]["model_info"]["id"])
    return {s: {DEPLOYMENTS[d] for d in ids} for s, ids in seen.items()}


def measure_litellm_split(
    service: LiteLLMService, sessions: list[str], turns: int, sample: int
) -> list[str]:
    """Rows of the split table for the LiteLLM proxy, and its stickiness and moves."""
    router = service.router()
    picked: dict[int, dict[str, set[str]]] = {}
    rows = []
    for weight in (5, 25):
        router.set_weight(weight)
        picked[weight] = litellm_turns(service, sessions, turns)
        canary = sum(1 for pools in picked[weight].values() if pools == {"canary"})
        mixed = sum(1 for pools in picked[weight].values() if len(pools) > 1)
        low, high = binomial_interval(len(sessions), weight / 100)
        inside = "yes" if low <= canary <= high else "NO"
        real = sessions[: sample // 2] * 2
        answers = service.route(real)
        agree = sum(a in picked[weight][s] for a, s in zip(answers, real, strict=True))
        rows.append(
            f"| LiteLLM  | {weight:3}% | {canary:6} | {low:4}-{high:<4} | {inside:6} |"
            f" turns on both pools: {mixed}; real requests where the pick said: "
            f"{agree}/{len(real)} |"
        )
    on = {w: {s for s, p in picked[w].items() if p == {"canary"}} for w in picked}
    moved = len(on[25] - on[5])
    rows.append(
        f"| 5% -> 25% moved {moved} sessions ({100 * moved / len(sessions):.2f} points); "
        f"on the canary at 5% and not at 25%: {len(on[5] - on[25])} |"
    )
    router.set_weight(0)
    return rows


def start_litellm(directory: Path) -> LiteLLMService | None:
    """The LiteLLM proxy with its two replicas, or None (said why) when it cannot start."""
    directory.mkdir()
    service = LiteLLMService(directory)
    try:
        service.start()
    except BaseException as exc:  # not installed (tests.required's Failed) or broken
        print(f"the LiteLLM proxy is not available: skipped ({exc})")
        service.close()
        return None
    return service


def main() -> None:
    """Run the measurements and print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100, help="changes timed per driver")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions per split")
    parser.add_argument("--turns", type=int, default=15, help="LiteLLM: turns per session")
    parser.add_argument("--sample", type=int, default=300, help="LiteLLM: real requests")
    args = parser.parse_args()

    pools = Pools()
    services: list[HAProxyService | NginxService] = []
    with tempfile.TemporaryDirectory(prefix="router-bench-") as scratch:
        root = Path(scratch)
        routers: dict[str, Router] = {"file": FileRouter(root / "weights.json")}
        litellm: LiteLLMService | None = None
        try:
            for name, kind in (("haproxy", HAProxyService), ("nginx", NginxService)):
                binary = which(name)
                if binary is None:
                    print(f"{name} is not installed: skipped")
                    continue
                (root / name).mkdir()
                service = kind(root / name, pools, binary)
                service.start()
                services.append(service)
                routers[name] = service.router()
            litellm = start_litellm(root / "litellm")
            if litellm is not None:
                routers["litellm"] = litellm.router()
            print(f"One weight change, set + verified read-back ({args.changes} changes each):\n")
            print("| driver  | median ms | p90 ms | x file |")
            print("|---------|-----------|--------|--------|")
            baseline = None
            for name, router in routers.items():
                timings = sorted(time_changes(router, args.changes))
                median = statistics.median(timings)
                baseline = baseline or median
                p90 = timings[int(0.9 * (len(timings) - 1))]
                print(
                    f"| {name:7} | {median * 1000:9.2f} | {p90 * 1000:6.2f} "
                    f"| {median / baseline:6.1f} |"
                )
            sessions = session_ids(args.sessions)
            print(f"\nSplit of {args.sessions} distinct sessions (99.9% binomial range):\n")
            print("| proxy    | set  | canary | range     | inside |")
            print("|----------|------|--------|-----------|--------|")
            for service in services:
                print("\n".join(measure_split(service, sessions)))
            if litellm is not None:
                print("\n".join(measure_litellm_split(litellm, sessions, args.turns, args.sample)))
        finally:
            for service in services:
                service.stop()
            if litellm is not None:
                litellm.close()
            pools.close()


if __name__ == "__main__":
    main()
