"""Hashing throughput of ``rolloutctl artefact pin``: serial against parallel, in MB/s.

    python3 bench/artefact_hash.py [--files 8] [--mib 48] [--repeats 3]

Writes ``files`` random files of ``mib`` MiB each in a temporary directory (a model's
shards, a few hundred MB in all), then hashes the directory with 1, 2, 4 and 8 worker
threads as ``pin`` does (1 MiB chunks), ``repeats`` times each, and prints the median
throughput and its ratio to the serial run. The files were just written, so they are read
from the page cache: the figures are hashing speed, not disk speed (a cold read of a 140 GB
model is bounded by the disk). The directory is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rolloutd.deploy.artefacts import hash_directory

MIB = 1024 * 1024


def write_files(root: Path, count: int, mib: int) -> int:
    """``count`` files of random bytes; returns the total size."""
    for i in range(count):
        with (root / f"model-{i + 1:05d}-of-{count:05d}.safetensors").open("wb") as handle:
            for _ in range(mib):
                handle.write(os.urandom(MIB))
    return count * mib * MIB


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rolloutd-bench-") as scratch:
        root = Path(scratch)
        total = write_files(root, args.files, args.mib)
        hash_directory(root, workers=1)  # warm the page cache
        print(
            f"{args.files} files x {args.mib} MiB = {total / MIB:.0f} MiB, "
            f"{os.cpu_count()} CPUs, median of {args.repeats}"
        )
        print(f"{'workers':>7}  {'seconds':>8}  {'MB/s':>8}  {'vs serial':>9}")
        serial = None
        for workers in (1, 2, 4, 8):
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                hash_directory(root, workers=workers)
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            serial = serial or median
            rate = total / 1e6 / median
            print(f"{workers:>7}  {median:>8.2f}  {rate:>8.0f}  {serial / median:>8.2f}x")


if __name__ == "__main__":
    main()
