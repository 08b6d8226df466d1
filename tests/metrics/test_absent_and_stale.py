"""Absent is not zero, and stale is not data: the shipped templates on a real Prometheus.

A small exporter serves each pool's engine metrics and the gateway's from paths whose text
the test sets (and can silence); Debian's prometheus scrapes them every second with the pool
label on each engine target, as a deployment's scrape config adds it.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rolloutd.gates.base import MeasurementError
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import Labels, load_templates
from tests.e2e.services import PrometheusService
from tests.metrics.exporter import TextExporter
from tests.routers.services import find_binary

pytestmark = pytest.mark.slow
WINDOW = timedelta(seconds=20)

# Triton before 24.08 (server 2.49): failures carry no reason label.
OLD_TRITON = """\
# TYPE nv_inference_request_success counter
nv_inference_request_success{{model="ensemble",version="1"}} {ok}
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{{model="ensemble",version="1"}} 0
"""
# Triton 24.08 and later: every reason's series exists from the model's load.
NEW_TRITON = """\
# TYPE nv_inference_request_success counter
nv_inference_request_success{{model="ensemble",version="1"}} {ok}
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{{model="ensemble",reason="REJECTED",version="1"}} 0
nv_inference_request_failure{{model="ensemble",reason="CANCELED",version="1"}} 0
nv_inference_request_failure{{model="ensemble",reason="BACKEND",version="1"}} 0
nv_inference_request_failure{{model="ensemble",reason="OTHER",version="1"}} 0
"""
GATEWAY = """\
# TYPE agent_sessions_total counter
agent_sessions_total{{pool="canary"}} {n}
agent_sessions_total{{pool="stable"}} {n}
# TYPE agent_escalations_total counter
agent_escalations_total{{pool="canary"}} 0
agent_escalations_total{{pool="stable"}} 0
"""


class Exporter(TextExporter):
    """Serves ``texts[path]`` formatted with a count that grows by 10 per scrape; a path in
    ``silent`` answers 503, as a dead exporter's port (or a hung one) does to Prometheus."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.silent: set[str] = set()
        super().__init__(self.text)

    def text(self, path: str, n: int) -> str | None:
        if path in self.silent or path not in self.texts:
            return None
        return self.texts[path].format(ok=10 * n, n=10 * n)


class Scraping(PrometheusService):
    """Prometheus scraping the exporter's /canary and /stable (pool-labelled) and /gateway."""

    def __init__(self, directory: Path, exporter: Exporter) -> None:
        super().__init__(
            directory, find_binary("prometheus"), replicas=[], gateway_url=f"http://{exporter.host}"
        )
        config = json.loads(self.config.read_text())
        config["scrape_configs"] = [
            {
                "job_name": pool,
                "metrics_path": f"/{pool}",
                "static_configs": [{"targets": [exporter.host], "labels": {"pool": pool}}],
            }
            for pool in ("canary", "stable")
        ] + [
            {
                "job_name": "gateway",
                "metrics_path": "/gateway",
                "static_configs": [{"targets": [exporter.host]}],
            }
        ]
        self.config.write_text(json.dumps(config))
        self.expected_targets = 3


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Scraping, Exporter]]:
    """A fresh Prometheus and exporter per test (series must not leak between tests)."""
    exporter = Exporter()
    service = Scraping(tmp_path, exporter)
    try:
        yield service, exporter
    finally:
        service.stop()
        exporter.close()


def _source(service: Scraping, templates: str) -> PrometheusMetrics:
    return PrometheusMetrics(
        service.url,
        load_templates(templates),
        labels=Labels(model="ensemble"),
        scrape_interval=timedelta(seconds=1),
    )


def _error(source: PrometheusMetrics, signal: str, pool: str = "canary") -> MeasurementError:
    """The measurement's error once a few scrapes are in (until then, any error)."""
    with pytest.raises(MeasurementError) as caught:
        source.measure(signal, pool, WINDOW, datetime.now(UTC))  # type: ignore[arg-type]
    return caught.value


def _silenced(
    world: tuple[Scraping, Exporter], silent: str, signal: str
) -> tuple[PrometheusMetrics, MeasurementError]:
    """Scrape every exporter; once ``signal`` measures 0 on the canary, silence the ``silent``
    exporter. The source, and the error ``signal`` measures with once its samples went stale
    (within 10 s)."""
    service, exporter = world
    _started(service, NEW_TRITON, NEW_TRITON, exporter)
    source = _source(service, "triton-trtllm")
    assert source.measure(signal, "canary", WINDOW, datetime.now(UTC)).value == 0
    exporter.silent.add(silent)
    deadline = time.monotonic() + 10
    while True:
        try:
            source.measure(signal, "canary", WINDOW, datetime.now(UTC))
        except MeasurementError as exc:
            return source, exc
        assert time.monotonic() < deadline, f"the silent {silent} still measured as data"
        time.sleep(0.5)


def _started(service: Scraping, canary: str, stable: str, exporter: Exporter) -> None:
    exporter.texts.update(canary=canary, stable=stable, gateway=GATEWAY)
    service.start()
    service.wait_targets_up()
    service.wait_scrapes(3)  # enough for increase() over the window


def test_an_old_triton_without_the_reason_label_is_absent_not_zero(
    world: tuple[Scraping, Exporter],
) -> None:
    """Before Triton 24.08 the REJECTED series does not exist: the queue-timeout signals are
    inconclusive, naming the series and the label, where a fallback to 0 passed them."""
    service, exporter = world
    _started(service, OLD_TRITON, OLD_TRITON, exporter)
    source = _source(service, "triton-trtllm")
    for signal in ("queue_timeouts", "queue_timeout_rate"):
        reason = _error(source, signal).reason
        assert "no series for nv_inference_request_failure{" in reason
        assert 'reason="REJECTED"' in reason
        assert "exists on the canary pool, but none with" in reason
        assert "24.08" in reason  # the template's note on versions


def test_an_absent_series_is_named_before_a_quiet_window(
    world: tuple[Scraping, Exporter],
) -> None:
    """At the first scrape the request counters exist but have no increase yet (no samples),
    while the REJECTED series will never exist: the answer names the absent series, since
    that is permanent and a quiet window is not."""
    service, exporter = world
    _started(service, OLD_TRITON, OLD_TRITON, exporter)
    query = urllib.parse.urlencode({"query": 'nv_inference_request_success{pool="canary"}[1m]'})
    answer = service._get(f"/api/v1/query?{query}")
    assert answer is not None
    first = float(json.loads(answer)["data"]["result"][0]["values"][0][0])
    at_first_scrape = datetime.fromtimestamp(first + 0.1, tz=UTC)
    source = _source(service, "triton-trtllm")
    with pytest.raises(MeasurementError) as caught:
        source.measure("queue_timeout_rate", "canary", WINDOW, at_first_scrape)
    assert "no series for nv_inference_request_failure{" in caught.value.reason
    assert 'reason="REJECTED"' in caught.value.reason


def test_a_new_triton_with_no_failure_yet_reads_a_true_zero(
    world: tuple[Scraping, Exporter],
) -> None:
    """Since 24.08 the REJECTED series exists from the start: no failure is a measured 0."""
    service, exporter = world
    _started(service, NEW_TRITON, NEW_TRITON, exporter)
    measured = _source(service, "triton-trtllm").measure(
        "queue_timeouts", "canary", WINDOW, datetime.now(UTC)
    )
    assert measured.value == 0
    assert measured.samples is not None and measured.samples > 0


def test_a_pool_without_its_label_says_so(world: tuple[Scraping, Exporter]) -> None:
    """A signal asked for a pool whose targets lack the label names the pool matcher."""
    service, exporter = world
    _started(service, NEW_TRITON, NEW_TRITON, exporter)
    reason = _error(_source(service, "triton-trtllm"), "queue_timeouts", pool="shadow").reason
    assert 'exists, but not on the shadow pool (pool="shadow")' in reason


def test_a_silent_canary_exporter_is_stale_not_frozen_data(
    world: tuple[Scraping, Exporter],
) -> None:
    """The canary's exporter stops answering: within two scrape intervals its signals say
    there are no fresh samples, although the window still holds its earlier counts; stable's
    still answer."""
    source, stale = _silenced(world, "canary", "queue_timeouts")
    assert "no fresh samples from the canary pool" in stale.reason
    assert source.measure("queue_timeouts", "stable", WINDOW, datetime.now(UTC)).value == 0


def test_a_silent_gateway_makes_its_signals_stale(world: tuple[Scraping, Exporter]) -> None:
    """The gateway's exporter goes silent: the escalation counts it last sent are not data."""
    _, stale = _silenced(world, "gateway", "escalations")
    assert "no fresh samples from the canary pool" in stale.reason
    assert "agent_sessions_total" in stale.reason
