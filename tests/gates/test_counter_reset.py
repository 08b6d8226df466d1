"""A canary replica that restarts mid-step sets its counters back to zero; ``increase()`` reads
the drop as a reset, so the restart by itself neither fails nor passes the compare gate.

The counters of five Triton replicas (two canary, three stable) are written with a timestamp
every 15 s for an hour and backfilled into a real Prometheus with ``promtool``; the gate asks
it through ``PrometheusMetrics`` and the shipped ``triton-trtllm`` templates, at past times.
Each data set exists twice, under two ``model`` labels: with a restart of canary replica 0
and without. ``bench/traffic.py`` reads the same samples with its own ``increase()``, which
must agree with Prometheus' (the benchmark's counters are Prometheus' counters).
"""

from __future__ import annotations

import json
import random
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.traffic import Series, increase
from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan
from rolloutd.drivers import PlanDrivers
from rolloutd.gates.base import Evaluation, Judging
from rolloutd.gates.evaluate import evaluate_gate
from tests.e2e.services import PrometheusService
from tests.plans import example_dict, plan_of
from tests.routers.services import find_binary

SCRAPE = 15
START = datetime.now(UTC).replace(microsecond=0, second=0) - timedelta(hours=3)
HOUR = 240  # scrapes
RESTART = 121  # the canary replica restarts 7 s after the 121st scrape (30 min in)
REPLICAS = {"canary": ("c0", "c1"), "stable": ("s0", "s1", "s2")}


@dataclass(frozen=True)
class Data:
    """One model's counters: requests per scrape per replica, the timeout probability per
    pool, and whether canary replica c0 restarts."""

    model: str
    canary_timeouts: float
    restart: bool


DATA = (
    Data("aa-reset", 0.01, True),
    Data("aa", 0.01, False),
    Data("bad-reset", 0.05, True),
    Data("bad", 0.05, False),
)


def _counters(data: Data) -> dict[tuple[str, str, str], list[tuple[float, int]]]:
    """(replica, pool, counter) -> [(time, value)] every 15 s. The same seed with and without
    the restart, so the two differ only by it: the restarted replica's counters start again
    from zero 7 s after a scrape, and the next scrape sees only the 8 s after the restart."""
    rng = random.Random(data.model.removesuffix("-reset"))
    found: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for pool, replicas in REPLICAS.items():
        rate = data.canary_timeouts if pool == "canary" else 0.01
        for replica in replicas:
            ok = rejected = 0
            for i in range(HOUR + 1):
                at = START.timestamp() + i * SCRAPE + 2  # scraped 2 s after the quarter
                requests = 40 if i else 0
                failed = sum(rng.random() < rate for _ in range(requests))
                if data.restart and replica == "c0" and i == RESTART + 1:
                    ok, rejected = (requests - failed) * 8 // 15, failed * 8 // 15
                else:
                    ok, rejected = ok + requests - failed, rejected + failed
                found.setdefault((replica, pool, "success"), []).append((at, ok))
                found.setdefault((replica, pool, "rejected"), []).append((at, rejected))
    return found


def _openmetrics() -> str:
    lines = []
    for family, counter in (
        ("nv_inference_request_success", "success"),
        ("nv_inference_request_failure", "rejected"),
    ):
        lines.append(f"# TYPE {family} unknown")
        for data in DATA:
            for (replica, pool, name), samples in _counters(data).items():
                if name != counter:
                    continue
                labels = f'model="{data.model}",pool="{pool}",instance="{replica}"'
                if counter == "rejected":
                    labels += ',reason="REJECTED"'
                lines += [f"{family}{{{labels}}} {value} {at:.3f}" for at, value in samples]
    return "\n".join([*lines, "# EOF", ""])


class BackfilledPrometheus(PrometheusService):
    """Debian's prometheus over a TSDB that promtool built from OpenMetrics; no scraping."""

    def __init__(self, directory: Path) -> None:
        super().__init__(
            directory, find_binary("prometheus"), replicas=[], gateway_url="http://127.0.0.1:9"
        )
        self.config.write_text(json.dumps({"global": {"scrape_interval": "15s"}}))
        source = directory / "counters.om"
        source.write_text(_openmetrics())
        promtool = find_binary("promtool")
        command = [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q"]
        subprocess.run([*command, str(source), str(self.data)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackfilledPrometheus]:
    """The backfilled Prometheus for the module."""
    service = BackfilledPrometheus(tmp_path_factory.mktemp("backfilled"))
    try:
        service.start()
        yield service
    finally:
        service.stop()


def _plan(url: str, model: str) -> Plan:
    data = example_dict()
    data["metrics"] = {
        "source": "prometheus",
        "url": url,
        "templates": "triton-trtllm",
        "pool_label": "pool",
        "model": model,
        "scrape_interval": "15s",
    }
    data["gates"]["timeouts_not_rising"] = {"kind": "compare", "signal": "queue_timeouts"}
    return plan_of(data)


def _judge(service: BackfilledPrometheus, model: str, begun: float, minutes: float) -> Evaluation:
    """The compare gate on queue timeouts as a rollback trigger, in a step that began
    ``begun`` minutes into the data, ``minutes`` into the data."""
    plan = _plan(service.url, model)
    source = PlanDrivers().metrics(1, plan)
    now = START + timedelta(minutes=minutes, seconds=5)
    step = START + timedelta(minutes=begun)
    judging = Judging("timeouts_not_rising", "trigger", source, now, plan, step, 5)
    return evaluate_gate(plan.gates["timeouts_not_rising"], judging)


@pytest.mark.parametrize(
    ("model", "begun", "minutes", "verdict"),
    [
        ("aa", 0, 60, Verdict.PASS),
        ("aa", 25, 35, Verdict.PENDING),  # ten minutes: too few blocks to judge yet
        ("bad", 0, 60, Verdict.FAIL),
    ],
)
def test_a_restart_on_one_canary_replica_changes_no_verdict(
    prometheus: BackfilledPrometheus, model: str, begun: float, minutes: float, verdict: Verdict
) -> None:
    """With and without a restart 30 min in, inside the step's window: a clean canary passes
    (or waits), a worse one fails, and the counts differ by at most what the restarted
    replica served between its last scrape and the restart."""
    plain = _judge(prometheus, model, begun, minutes)
    reset = _judge(prometheus, f"{model}-reset", begun, minutes)
    assert plain.verdict is verdict, plain.reason
    assert reset.verdict is verdict, reset.reason
    lost = plain.evidence["canary"]["exposure"] - reset.evidence["canary"]["exposure"]
    # At most one scrape interval of the restarted replica, and the rounding of increase().
    assert 0 < lost <= 40 + 2


def _series(data: Data, replica: str, pool: str, counter: str) -> Series:
    samples = _counters(data)[(replica, pool, counter)]
    times = np.array([at for at, _ in samples])
    values = np.array([float(v) for _, v in samples])
    drops = np.concatenate([[0.0], np.where(np.diff(values) < 0, values[:-1], 0.0)])
    return Series(times, values, values + np.cumsum(drops))


@pytest.mark.parametrize("window", [600, 1800, 2400, 3600])
def test_the_benchmarks_increase_is_prometheus_increase(
    prometheus: BackfilledPrometheus, window: int
) -> None:
    """bench/traffic.py's increase() of the restarted replica's counter, extrapolation and
    reset included, equals what Prometheus answers for the same window."""
    data = DATA[0]
    end = START.timestamp() + HOUR * SCRAPE - 1
    query = (
        f'increase(nv_inference_request_success{{model="{data.model}",instance="c0"}}[{window}s])'
    )
    answer = _instant(prometheus, query, end)
    ours, ok, _ = increase(
        _series(data, "c0", "canary", "success"), np.array([end - window]), np.array([end])
    )
    assert ok[0]
    assert ours[0] == pytest.approx(answer, rel=1e-9)


def _instant(service: BackfilledPrometheus, query: str, at: float) -> float:
    url = f"{service.url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": at})
    with urllib.request.urlopen(url, timeout=5) as response:
        body: Any = json.loads(response.read())
    (result,) = body["data"]["result"]
    return float(result["value"][1])
