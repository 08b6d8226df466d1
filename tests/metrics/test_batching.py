"""Both pools in one query: the same answers as asked per pool, from half the queries.

The equality is checked where it matters, on the shipped templates against a real
Prometheus scraping the simulated fleet (vLLM and Triton flavours) with traffic on both
pools: every signal, asked jointly and per pool at the same moment, gives the same value,
samples and evidence, or the same inconclusive reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rolloutd.gates.base import Measurement, MeasurementError
from rolloutd.metrics.batching import both_pools
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import Labels, load_templates
from tests.e2e.fleet_process import FleetProcess
from tests.e2e.services import FleetHAProxy, PrometheusService
from tests.routers.services import find_binary

WINDOW = timedelta(seconds=15)
LABELS = Labels(model="atlas-70b")


# --- the rewrite -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "joint"),
    [
        (
            'sum(increase(a{{pool_label}="{pool}"}[{window}]))'
            ' / sum(increase(b{{pool_label}="{pool}"}[{window}]))',
            'sum by (pool) (increase(a{pool=~"canary|stable"}[15s])) / '
            'sum by (pool) (increase(b{pool=~"canary|stable"}[15s]))',
        ),
        (
            'histogram_quantile(0.9, sum by (le) (rate(h{{pool_label}="{pool}"}[{window}])))',
            'histogram_quantile(0.9, sum by (le, pool) (rate(h{pool=~"canary|stable"}[15s])))',
        ),
        ('max(g{{pool_label}="{pool}", x="y"})', 'max by (pool) (g{pool=~"canary|stable", x="y"})'),
    ],
)
def test_a_template_is_rewritten_to_keep_the_pool_apart(template: str, joint: str) -> None:
    assert both_pools(template, WINDOW, LABELS) == (joint, "pool")


@pytest.mark.parametrize(
    "template",
    [
        'a{{pool_label}="{pool}"}',  # no aggregation: the answer keeps every label
        'sum(a{{pool_label}="{pool}"}) by (le)',  # grouping after the parentheses
        'sum without (x) (a{{pool_label}="{pool}"})',
        'topk(1, a{{pool_label}="{pool}"})',
        'sum(a{{pool_label}="{pool}"}) / on() sum(b{{pool_label}="{pool}"})',
        'sum(a{{pool_label}="{pool}"}) or vector(0)',
        'max(label_replace(sum(a{{pool_label}="{pool}"}), "v", "a", "", ""))',
        'sum(a{{pool_label}!="{pool}"})',
        'sum(a{x="{pool}"}) / sum(b{{pool_label}="{pool}"})',  # two pool labels
    ],
)
def test_a_shape_that_could_change_the_answer_is_asked_per_pool(template: str) -> None:
    assert both_pools(template, WINDOW, LABELS) is None


# --- on a real Prometheus over the simulated fleet ----------------------------------------


class Counted(PrometheusMetrics):
    """A source that counts the queries it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    def _ask(self, query: str, now: datetime) -> Any:
        self.asked.append(query)
        return super()._ask(query, now)


@pytest.fixture(scope="module", params=["vllm", "triton"])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, PrometheusService]]:
    """The simulated fleet under traffic, 25% of it on the canary, scraped by Prometheus."""
    flavor: str = request.param
    directory = tmp_path_factory.mktemp(f"batching-{flavor}")
    fleet = FleetProcess(flavor, directory / "fleet.log")
    haproxy = FleetHAProxy(directory, fleet.replicas, find_binary("haproxy"))
    prometheus = PrometheusService(
        directory,
        find_binary("prometheus"),
        replicas=fleet.replicas,
        gateway_url=fleet.gateway_url,
    )
    try:
        haproxy.start()
        haproxy.router().set_weight(25)
        prometheus.start()
        fleet.start_traffic(haproxy.url)
        prometheus.wait_targets_up()
        yield ("vllm" if flavor == "vllm" else "triton-trtllm"), prometheus
    finally:
        prometheus.stop()
        haproxy.stop()
        fleet.stop()


@dataclass(frozen=True)
class Flowing:
    """The fleet's templates and Prometheus once both pools have had a window of traffic,
    and a moment to read them at."""

    templates: str
    service: PrometheusService
    now: datetime

    def source(self, *, batch: bool) -> Counted:
        return _source(self.service, self.templates, batch=batch)


@pytest.fixture
def flowing(fleet: tuple[str, PrometheusService]) -> Flowing:
    templates, service = fleet
    return Flowing(templates, service, _until_traffic(service, templates))


def _source(service: PrometheusService, templates: str, *, batch: bool) -> Counted:
    return Counted(
        service.url,
        load_templates(templates),
        labels=LABELS,
        scrape_interval=timedelta(seconds=1),
        batch=batch,
    )


def _both(source: PrometheusMetrics, signal: str, now: datetime) -> list[Any]:
    found: list[Any] = []
    for pool in ("canary", "stable"):
        try:
            measured = source.measure(signal, pool, WINDOW, now)
        except MeasurementError as exc:
            found.append(("inconclusive", exc.reason, exc.query))
        else:
            found.append(_comparable(measured))
    return found


def _comparable(measured: Measurement) -> tuple[Any, ...]:
    raw = {key: value for key, value in measured.raw.items() if key != "asked_jointly"}
    return (measured.value, measured.samples, measured.query, raw)


def _until_traffic(service: PrometheusService, templates: str) -> datetime:
    """A moment a few scrapes back (so no late sample lands between two readings of it)
    once both pools have had a window's worth of requests before it."""
    source = _source(service, templates, batch=False)
    deadline = time.monotonic() + 60
    while True:
        now = datetime.now(UTC) - timedelta(seconds=3)
        try:
            for pool in ("canary", "stable"):
                measured = source.measure("error_rate", pool, WINDOW, now)
                assert measured.samples and measured.samples > 10
                source.measure("error_rate", pool, WINDOW, now - WINDOW)
            return now
        except (MeasurementError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


@pytest.mark.slow
def test_every_signal_reads_the_same_jointly_and_per_pool_from_half_the_queries(
    flowing: Flowing,
) -> None:
    now = flowing.now
    alone, jointly = flowing.source(batch=False), flowing.source(batch=True)
    halved = 0
    for signal, spec in load_templates(flowing.templates).signals.items():
        before = len(alone.asked), len(jointly.asked)
        per_pool = _both(alone, signal, now)
        assert _both(jointly, signal, now) == per_pool, signal
        asked = len(alone.asked) - before[0], len(jointly.asked) - before[1]
        batchable = jointly._joint_queries(signal, spec, WINDOW) is not None
        if batchable and all(found[0] != "inconclusive" for found in per_pool):
            assert 2 * asked[1] == asked[0], (signal, asked)  # one query a role, not two
            halved += 1
    assert halved >= 15  # of 19 signals: all but the OOM count and absent series


@pytest.mark.slow
def test_the_other_pools_answer_is_kept_for_one_moment_only(flowing: Flowing) -> None:
    now, source = flowing.now, flowing.source(batch=True)
    source.measure("error_rate", "canary", WINDOW, now)
    asked = len(source.asked)
    source.measure("error_rate", "stable", WINDOW, now)
    assert len(source.asked) == asked  # stable came with the canary's queries
    source.measure("error_rate", "stable", WINDOW, now)
    assert len(source.asked) > asked  # and was handed out once
    later = now + timedelta(seconds=1)
    source.measure("error_rate", "canary", WINDOW, later)
    asked = len(source.asked)
    source.measure("error_rate", "stable", WINDOW, now)  # an older moment is asked again
    assert len(source.asked) > asked


def test_sources_of_one_prometheus_share_one_client_per_thread() -> None:
    """A thousand rollouts on one Prometheus keep one keep-alive connection per tick thread,
    not one per rollout."""
    templates = load_templates("vllm")
    first, second = (PrometheusMetrics("http://127.0.0.1:9", templates) for _ in range(2))
    other = PrometheusMetrics("http://127.0.0.1:10", templates)
    assert first._client is second._client
    assert other._client is not first._client
    elsewhere: list[object] = []
    thread = threading.Thread(target=lambda: elsewhere.append(first._client))
    thread.start()
    thread.join()
    assert elsewhere[0] is not first._client
