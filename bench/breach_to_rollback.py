"""How long from an OOM on the canary to HAProxy sending it no new sessions.

    python3 bench/breach_to_rollback.py [--breaches 20] [--flavor triton|vllm]
                                        [--server postgresql:///postgres]

Starts the e2e stack once (``tests/e2e/stack.py``): the simulated fleet with 16 agents,
a real HAProxy in front of it, a real Prometheus scraping every replica every second, and
the daemon with its default drivers on a scratch Postgres database. Then, ``--breaches``
times: start a fresh rollout (canary 5%, every e2e gate, the OOM trigger over a 5 s
window), wait until HAProxy reads 5%, wait a random part of a second (so the fault lands
anywhere in the scrape and tick cycles), crash the canary's engine over its admin endpoint,
and poll HAProxy's runtime API every 10 ms until the canary's weight reads 0. Before the
next rollout it waits until the restart has left Prometheus's 5 s window.

The figures are split where the tick that found the breach began (the verdict's
``evaluated_at`` is that tick's clock reading): before it, the restart must be scraped and a
trigger tick must start (both every 1 s); after it, that tick asks Prometheus for every
trigger of the plan, writes the rollback and sets the weights. The ratio columns are in
scrape intervals.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The e2e stack lives in tests/, the benches' shared helpers in bench/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import add_server_option, scratch_database
from rolloutd.gates.base import MeasurementError
from rolloutd.logs import configure_logging
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import load_templates
from tests.e2e.services import SCRAPE_INTERVAL_S
from tests.e2e.stack import CANARY, Stack, binaries_present, wait_until

OOM_WINDOW = "5s"


def oom_window_clean(source: PrometheusMetrics) -> bool:
    """Whether Prometheus shows no canary restart in the OOM trigger's window any more."""
    try:
        found = source.measure("oom_events", "canary", timedelta(seconds=5), datetime.now(UTC))
    except MeasurementError:
        return False
    return found.value == 0


def breach_once(stack: Stack, index: int, source: PrometheusMetrics) -> tuple[float, float]:
    """One rollout, one OOM: (fault -> breach verdict, fault -> HAProxy reads 0) in seconds."""
    plan = stack.plan(
        f"bench-breach-{index}",
        bakes=("1h", "1h"),
        gate_overrides={"canary_oom": {"window": OOM_WINDOW}},
    )
    rollout = stack.start_rollout(plan)
    stack.wait_verified(rollout, 5, timeout=60)
    time.sleep(random.uniform(0.0, 1.0))
    fault_wall = datetime.now(UTC)
    fault = time.monotonic()
    stack.set_faults(CANARY, oom=True)
    while stack.weight() != 0:
        if time.monotonic() - fault > 60:
            raise SystemExit(f"breach {index}: HAProxy still reads {stack.weight()}% after 60 s")
        time.sleep(0.01)
    to_zero = time.monotonic() - fault
    stack.wait_state(rollout, {"rolled_back"}, 30)
    breach = next(e for e in stack.evaluations(rollout, "canary_oom") if e["verdict"] == "breach")
    to_verdict = (breach["evaluated_at"] - fault_wall).total_seconds()
    wait_until(lambda: oom_window_clean(source), 30, "the OOM to leave the 5 s window", 0.2)
    return to_verdict, to_zero


def summary(label: str, values: list[float]) -> str:
    """One row of the table: median, p90, max, and median and max in scrape intervals."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    median = statistics.median(ordered)
    return (
        f"{label:<34} {median:>7.2f} {p90:>7.2f} {ordered[-1]:>7.2f} "
        f"{median / SCRAPE_INTERVAL_S:>9.1f}x {ordered[-1] / SCRAPE_INTERVAL_S:>8.1f}x"
    )


def measure(url: str, flavor: str, breaches: int) -> tuple[list[float], list[float]]:
    """Run the breaches on one stack; returns the two timings of each."""
    verdicts, zeros = [], []
    stack = Stack(url, flavor)  # type: ignore[arg-type]
    try:
        stack.start()
        stack.start_daemon()
        assert stack.prometheus is not None
        source = PrometheusMetrics(stack.prometheus.url, load_templates(stack.templates))
        for index in range(breaches):
            to_verdict, to_zero = breach_once(stack, index, source)
            verdicts.append(to_verdict)
            zeros.append(to_zero)
            print(
                f"breach {index + 1:>2}: verdict after {to_verdict:5.2f} s, "
                f"HAProxy 0% after {to_zero:5.2f} s",
                flush=True,
            )
    finally:
        stack.close()
    return verdicts, zeros


def main() -> None:
    """Create the scratch database, run the breaches, print the table, drop the database."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--breaches", type=int, default=20)
    parser.add_argument("--flavor", choices=["triton", "vllm"], default="triton")
    add_server_option(parser)
    args = parser.parse_args()
    if not binaries_present():
        raise SystemExit("install prometheus and haproxy (Debian packages) first")
    configure_logging("critical")  # the daemon's rollback alerts would bury the table

    started = time.monotonic()
    with scratch_database(args.server) as url:
        verdicts, zeros = measure(url, args.flavor, args.breaches)

    after = [zero - verdict for verdict, zero in zip(verdicts, zeros, strict=True)]
    print(
        f"\nOOM on the canary -> HAProxy reads 0% canary: {len(zeros)} breaches, {args.flavor} "
        f"metrics, scrape every {SCRAPE_INTERVAL_S:g} s, trigger tick every 1 s, "
        f"{time.monotonic() - started:.0f} s wall\n"
    )
    print(
        f"{'seconds':<34} {'median':>7} {'p90':>7} {'max':>7} {'med/scrape':>10} {'max/scrape':>9}"
    )
    print(summary("fault -> breaching tick begins", verdicts))
    print(summary("that tick -> HAProxy reads 0", after))
    print(summary("fault -> HAProxy reads 0", zeros))


if __name__ == "__main__":
    main()
