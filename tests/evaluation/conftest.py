"""Fixtures for the suite tests: the example suite, simulated replicas, and their runs."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from rolloutd.core.plan import Plan
from rolloutd.evaluation.results import RunSummary
from rolloutd.evaluation.runner import RunnerOptions, run_suite
from rolloutd.evaluation.suite import Suite, load_suite
from rolloutd.sim.engine import Replica
from rolloutd.sim.profiles import Profile
from tests.plans import example_dict, plan_of

EXAMPLE = Path(__file__).resolve().parents[2] / "gates" / "suites" / "tool-args-300.jsonl"
# Generous: a loaded CI machine must not turn a slow answer into a request error here.
SIM = RunnerOptions(concurrency=16, send_expected=True, timeout_s=30, retries=2, backoff_s=0.01)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture(scope="session")
def example_suite() -> Suite:
    """The committed 300-case suite."""
    return load_suite(EXAMPLE)


def first_cases(path: Path, count: int) -> Path:
    """Write the example suite's first ``count`` cases to ``path``, for tests about how a suite
    is run and stored rather than what it finds."""
    path.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:count]))
    return path


def start(profile: Profile = "exact", *, seed: int = 0, pool: str = "canary") -> Replica:
    """A started simulated replica with a fast clock; the caller stops it."""
    return Replica(f"sim-{profile}", pool=pool, profile=profile, seed=seed, time_scale=1e-5).start()


@contextmanager
def fleet(canary: Profile = "exact") -> Iterator[tuple[Plan, Replica, Replica]]:
    """The example plan on an exact stable replica and a canary of profile ``canary``
    (both stopped after)."""
    stable, served = start("exact", pool="stable"), start(canary, pool="canary")
    try:
        data = example_dict()
        data["pools"]["stable"]["replicas"] = [{"name": "gpu-a", "url": stable.url}]
        data["pools"]["canary"]["replicas"] = [{"name": "gpu-d", "url": served.url}]
        yield plan_of(data), stable, served
    finally:
        stable.stop()
        served.stop()


@pytest.fixture(scope="session")
def profile_runs(example_suite: Suite) -> Iterator[dict[str, RunSummary]]:
    """The whole example suite run once against each answer profile."""
    runs: dict[str, RunSummary] = {}
    for profile in ("exact", "int4-like", "broken-schema"):
        replica = start(profile)
        try:
            runs[profile] = run_suite(example_suite, replica.url, options=SIM)
        finally:
            replica.stop()
    yield runs


@contextmanager
def engine(handler: Handler) -> Iterator[str]:
    """A real HTTP endpoint on 127.0.0.1 that answers every request with ``handler``, served
    by its own event loop on its own thread; yields its URL.

    A handler still running when its client gives up is cancelled, as a real engine would
    drop the work.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True, access_log=None)

    async def serve() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    try:
        port = asyncio.run_coroutine_threadsafe(serve(), loop).result(5)
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def closed_port() -> int:
    """A local port that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
