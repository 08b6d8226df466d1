"""The reference change on the simulated engine: capacity, then latency and timeouts.

    python3 bench/sim_capacity.py [--seconds 3] [--time-scale 0.02] [--sessions 20 40 60]

Prints the KV-cache plan of the reference deployment (70B FP8, FP16 KV, 4x L40S 48 GB) at
32,768 and 8,192 tokens, then drives one Triton replica at each max_seq_len with the
reference agent workload (prompt median 6,000 tokens, ~300 output, up to 15 turns) and
prints p50/p95 end-to-end latency (simulated seconds) and the queue-timeout rate, with the
8,192 figures as a ratio of the 32,768 baseline run beside them.
"""

from __future__ import annotations

import argparse

from rolloutd.core.capacity import GB, REFERENCE_DEPLOYMENT, max_seq_len_for, plan
from rolloutd.sim.config import REFERENCE_CANARY, REFERENCE_STABLE, EngineConfig
from rolloutd.sim.engine import Replica
from rolloutd.sim.traffic import TrafficGenerator, TrafficReport


def drive(config: EngineConfig, sessions: int, seconds: float, scale: float) -> TrafficReport:
    """Run the workload against one fresh replica."""
    with Replica("bench", config=config, time_scale=scale) as replica:
        return TrafficGenerator(
            replica.url, concurrency=sessions, time_scale=scale, duration_s=seconds
        ).run()


def main() -> None:
    """Print the capacity table and the latency/timeout table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="wall seconds per run")
    parser.add_argument("--time-scale", type=float, default=0.02)
    parser.add_argument("--sessions", type=int, nargs="+", default=[20, 40, 60])
    args = parser.parse_args()

    print("capacity: 70B FP8 weights, FP16 KV, 4x L40S 48 GB, TP 4, memory fraction 0.9")
    print(
        f"{'max_seq_len':>11} {'KV/token':>9} {'per seq GB':>10} {'KV pool GB':>10} {'resident':>8}"
    )
    for length in (32_768, 8_192):
        report = plan(REFERENCE_DEPLOYMENT, length)
        print(
            f"{length:>11,} {report.kv_bytes_per_token:>9,} "
            f"{report.sequence_bytes / GB:>10.2f} {report.kv_pool_bytes / GB:>10.1f} "
            f"{report.resident_sequences:>8}"
        )
    for target in (36, 40, 60):
        length = max_seq_len_for(REFERENCE_DEPLOYMENT, target)
        print(f"max_seq_len for {target} concurrent: {length:,}")
    print()
    print(
        f"{'sessions':>8} {'max_seq_len':>11} {'requests':>8} {'p50 s':>7} {'p95 s':>7} "
        f"{'timeouts':>8} {'p95 ratio':>9}"
    )
    for sessions in args.sessions:
        baseline = drive(REFERENCE_STABLE, sessions, args.seconds, args.time_scale)
        change = drive(REFERENCE_CANARY, sessions, args.seconds, args.time_scale)
        base_p95 = baseline.latency_quantile(0.95) or float("nan")
        for config, run in ((REFERENCE_STABLE, baseline), (REFERENCE_CANARY, change)):
            p50 = run.latency_quantile(0.5) or float("nan")
            p95 = run.latency_quantile(0.95) or float("nan")
            print(
                f"{sessions:>8} {config.max_seq_len:>11,} {run.total('requests'):>8} "
                f"{p50:>7.1f} {p95:>7.1f} {run.rate('timeouts'):>8.1%} {p95 / base_p95:>9.2f}"
            )


if __name__ == "__main__":
    main()
