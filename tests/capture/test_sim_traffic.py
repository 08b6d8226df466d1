"""Agent traffic through the simulated fleet with the gateway's capture on: the same seed
captures the same requests whatever the threads did, every line reads back whole, and a day
of it samples to a suite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from rolloutd.evaluation.capture import read_capture
from rolloutd.evaluation.sampling import sample_day
from rolloutd.evaluation.suite import load_suite
from rolloutd.gateway import Capture
from rolloutd.sim.engine import Replica
from rolloutd.sim.traffic import TrafficGenerator


def _serve(directory: Path, url: str) -> Capture:
    """40 agent sessions from 8 threads, half the tool calls captured."""
    capture = Capture(directory, share=0.5, seed=3)
    TrafficGenerator(
        url, concurrency=8, max_sessions=40, capture=capture, time_scale=1e-5, seed=4
    ).run()
    capture.close()
    return capture


def test_agent_traffic_is_captured_the_same_for_a_seed_and_samples_to_a_suite(
    tmp_path: Path,
) -> None:
    """Two runs of the same sessions from eight threads capture the same requests, read
    back whole, and sample to a suite."""
    replica = Replica("sim-exact", pool="stable", profile="exact", seed=1, time_scale=1e-5)
    replica.start()
    try:
        first = _serve(tmp_path / "first", replica.url)
        second = _serve(tmp_path / "second", replica.url)
    finally:
        replica.stop()
    now = datetime.now(UTC)
    since, until = now - timedelta(hours=1), now + timedelta(hours=1)
    seen = []
    for directory in (tmp_path / "first", tmp_path / "second"):
        read = read_capture(directory, since=since, until=until)
        assert not read.problems
        assert {r.pool for r in read.records} == {"stable"}
        seen.append({(r.session, r.request["messages"][-1]["content"]) for r in read.records})
        assert all("rolloutd_expected" not in r.request for r in read.records)
    assert seen[0] == seen[1] and first.captured == second.captured == len(seen[0]) > 50
    report = sample_day(
        tmp_path / "first", since=since, until=until, cases=30, seed=0, out=tmp_path / "s.jsonl"
    )
    assert report.kept == 30 and not report.problems
    assert len(load_suite(tmp_path / "s.jsonl")) == 30
