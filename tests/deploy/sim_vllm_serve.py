"""A stand-in for ``vllm serve MODEL [flags]``: the simulated vLLM replica of rolloutd.sim.

It takes vLLM's argv as a unit's ``ExecStart`` would pass it, refuses what vLLM refuses (an
unknown flag, a model path that does not exist) and then answers ``/health`` and
``/v1/models`` as vLLM does: the model's id is ``--served-model-name`` or the path, its
``root`` the path. It serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading

from rolloutd.sim.config import REFERENCE_STABLE, apply_engine_args
from rolloutd.sim.engine import Replica


def main() -> int:
    """Parse vLLM's flags, start the simulated engine, serve until SIGTERM."""
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--kv-cache-dtype")
    parser.add_argument("--enable-prefix-caching", action="store_true")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    args = parser.parse_args()
    if not os.path.exists(args.model):
        print(f"OSError: {args.model} does not exist", file=sys.stderr)
        return 1
    engine: dict[str, object] = {"model_path": args.model}
    if args.max_model_len:
        engine["max_model_len"] = args.max_model_len
    if args.gpu_memory_utilization:
        engine["gpu_memory_utilization"] = args.gpu_memory_utilization
    config = apply_engine_args(REFERENCE_STABLE, engine)
    config = dataclasses.replace(config, model=args.served_model_name or args.model)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    replica = Replica("vllm", flavor="vllm", config=config).start(args.port, args.host)
    print(f"serving {config.model} at {replica.url}", flush=True)
    try:
        stop.wait()
    finally:
        replica.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
