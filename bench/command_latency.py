"""How long an operator command takes to act when the next tick is a minute away (NOTIFY).

    python3 bench/command_latency.py [--commands 50] [--server postgresql:///postgres]

Creates a scratch database on the server, starts a leader and a standby ``rolloutd run``
(production lease settings), and starts one rollout whose plan ticks every 60 s. Then it
alternates ``pause`` and ``resume`` commands, written exactly as ``rolloutctl`` writes them
(the command row and its NOTIFY in one transaction), and times each from its commit until
the rollout's state has changed. ``rolloutctl``'s own start-up (an interpreter and imports)
is left out: it is the same with or without NOTIFY. The second row is the part until the
tick that applied the command began (its ``handled_at`` is that tick's clock reading), as
stamped by the two processes themselves: the rest is the tick's own work. Without NOTIFY
a command would wait for the next tick: uniformly 0-60 s, so half the interval on average.
The database is dropped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench._common

from bench._common import (
    DaemonProcess,
    add_server_option,
    nearest_rank,
    scratch_database,
    wait_for,
    write_file_plan,
)
from rolloutd.operations import start_rollout, submit_command
from rolloutd.planfile import load_plan
from rolloutd.store.db import make_engine, normalise_url, session_factory, transaction

TICK_SECONDS = 60


class Daemon(DaemonProcess):
    """One ``rolloutd run`` with its log in ``workdir``."""

    def __init__(self, name: str, url: str, workdir: Path) -> None:
        super().__init__(name, url, workdir / f"rolloutd-{name}.log")

    def logged(self, event: str) -> bool:
        """Whether the log has an event named ``event``."""
        return any(line.get("event") == event for line in self.log_events())


def stats(values: list[float]) -> list[float]:
    """Median, p90 and max."""
    return [statistics.median(values), nearest_rank(values, 0.9), max(values)]


def measure(url: str, workdir: Path, commands: int) -> tuple[list[float], list[float]]:
    """Start the daemons and the rollout; time ``commands`` commands; return both timings."""
    daemons = [Daemon("bench-a", url, workdir), Daemon("bench-b", url, workdir)]
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        wait_for(lambda: any(d.logged("leading") for d in daemons), 60, "a leader", 0.05)
        with transaction(sessions) as session:
            # A rollout that stays at its first step: a one-hour bake, ticked every 60 s.
            plan_path = write_file_plan(workdir, "bench", every=f"{TICK_SECONDS}s", bake="1h")
            loaded = load_plan(plan_path)
            rollout = start_rollout(session, loaded, actor="bench", now=datetime.now(UTC))
        conninfo = normalise_url(url).set(drivername="postgresql")
        with psycopg.connect(
            conninfo.render_as_string(hide_password=False), autocommit=True
        ) as poller:

            def state() -> str:
                row = poller.execute("SELECT state FROM rollouts WHERE id = %s", (rollout,))
                return str(row.fetchone()[0])  # type: ignore[index]

            wait_for(lambda: state() == "running", 30, "the rollout to start", 0.05)
            observed, stamped = [], []
            for i in range(commands):
                kind, expected = ("pause", "paused") if i % 2 == 0 else ("resume", "running")
                with transaction(sessions) as session:
                    command = submit_command(
                        session, rollout, kind, actor="bench", reason=None, now=datetime.now(UTC)
                    ).id
                committed = time.monotonic()
                wait_for(lambda e=expected: state() == e, 2 * TICK_SECONDS, kind, 0.002)
                observed.append(time.monotonic() - committed)
                row = poller.execute(
                    "SELECT handled_at - created_at FROM commands WHERE id = %s", (command,)
                ).fetchone()
                stamped.append(row[0].total_seconds())  # type: ignore[index]
                print(f"  {i + 1:>2} {kind:<6} {observed[-1] * 1000:7.1f} ms", file=sys.stderr)
        return observed, stamped
    except BaseException:
        for daemon in daemons:
            print(f"--- {daemon.log_path.name}\n{daemon.log_tail(10)}", file=sys.stderr)
        raise
    finally:
        for daemon in daemons:
            daemon.stop()
        engine.dispose()


def main() -> None:
    """Create the scratch database, measure, print the table, drop the database."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=50)
    add_server_option(parser)
    args = parser.parse_args()

    started = time.monotonic()
    with (
        scratch_database(args.server) as url,
        tempfile.TemporaryDirectory(prefix="rolloutd-bench-") as workdir,
    ):
        observed, stamped = measure(url, Path(workdir), args.commands)

    rows = [
        ("with NOTIFY: commit to new state", stats(observed)),
        ("  of which until the tick began", stats(stamped)),
        # Uniform over the tick interval: median and mean half of it, p90 0.9 of it.
        (
            f"without NOTIFY: next {TICK_SECONDS} s tick",
            [0.5 * TICK_SECONDS, 0.9 * TICK_SECONDS, TICK_SECONDS],
        ),
    ]
    print(
        f"\ncommand -> effect, {len(observed)} commands (pause/resume alternating),"
        f" tick interval {TICK_SECONDS} s, {time.monotonic() - started:.0f} s wall"
    )
    print(f"{'':<34} {'median':>9} {'p90':>9} {'max':>9}")
    for label, cells in rows:
        print(f"{label:<34} " + " ".join(f"{v:>8.3f}s" for v in cells))
    print("(without NOTIFY: expected, not measured; a command waits for the next tick)")


if __name__ == "__main__":
    main()
