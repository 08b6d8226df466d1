"""gates/litellm.yaml against a real Prometheus scraping the real LiteLLM proxy: the proxy's
per-deployment series, mapped to pools by the scrape job's relabelling, answer the gates,
and absent stays distinct from zero."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rolloutd.gates.base import MeasurementError
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import Labels, load_templates
from tests.e2e.services import PrometheusService
from tests.routers.litellm_service import DEPLOYMENTS, LiteLLMService
from tests.routers.services import find_binary, session_ids

WINDOW = timedelta(minutes=5)


@pytest.fixture
def prometheus(litellm_service: LiteLLMService, tmp_path: Path) -> Iterator[PrometheusService]:
    """Prometheus scraping the shared proxy every second."""
    with _scraping(litellm_service, tmp_path) as service:
        yield service


@contextmanager
def _scraping(litellm: LiteLLMService, directory: Path) -> Iterator[PrometheusService]:
    """Prometheus scraping ``litellm`` every second, deployments relabelled to pools as
    config/litellm/prometheus-scrape.yml does."""
    service = PrometheusService(
        directory, find_binary("prometheus"), replicas=[], gateway_url=litellm.url
    )
    config = json.loads(service.config.read_text())
    relabel = [
        {"source_labels": ["model_id"], "regex": ident, "target_label": "pool", "replacement": p}
        for ident, p in DEPLOYMENTS.items()
    ]
    config["scrape_configs"] = [
        {
            "job_name": "litellm",
            "metrics_path": "/metrics/",
            "static_configs": [{"targets": [litellm.url.removeprefix("http://")]}],
            "metric_relabel_configs": relabel,
        }
    ]
    service.config.write_text(json.dumps(config))
    service.expected_targets = 1
    service.start()
    try:
        service.wait_targets_up()
        yield service
    finally:
        service.stop()


def _source(prometheus: PrometheusService, pool_label: str = "pool") -> PrometheusMetrics:
    return PrometheusMetrics(
        prometheus.url,
        load_templates("litellm"),
        labels=Labels(pool_label=pool_label),
        scrape_interval=timedelta(seconds=1),
    )


def test_the_proxys_metrics_answer_the_gates_per_pool(
    litellm_service: LiteLLMService, prometheus: PrometheusService
) -> None:
    """At 50%, both pools have requests and latencies; stable's failures are a real 0 (no
    failure series yet: zero from its own request count), the failing canary's are not."""
    router = litellm_service.router()
    router.set_weight(50)
    canary = litellm_service.replicas["canary"]
    try:
        litellm_service.route(session_ids(80, seed=41))
        canary.set_faults(timeout_rate=1.0)
        answers = litellm_service.route(session_ids(80, seed=42))
    finally:
        canary.clear_faults()
        router.set_weight(0)
    assert any(a.startswith("HTTP") for a in answers)
    source = _source(prometheus)
    prometheus.wait_scrapes(3)
    now = datetime.now(UTC)
    stable = source.measure("error_rate", "stable", WINDOW, now)
    failing = source.measure("error_rate", "canary", WINDOW, now)
    assert stable.value == 0 and (stable.samples or 0) > 0
    assert failing.value > 0
    for pool in ("stable", "canary"):
        assert source.measure("e2e_latency", pool, WINDOW, now).value > 0
        assert source.measure("load_requests_per_replica", pool, WINDOW, now).value > 0


def test_a_pool_the_scrape_does_not_label_is_absent_not_zero(
    litellm_service: LiteLLMService, prometheus: PrometheusService
) -> None:
    """Without the relabelling (no such pool label), failures are no data, never 0."""
    litellm_service.router().set_weight(0)
    litellm_service.route(session_ids(10, seed=43))
    prometheus.wait_scrapes(2)
    with pytest.raises(MeasurementError, match="no series"):
        _source(prometheus, "tier").measure("errors", "stable", WINDOW, datetime.now(UTC))


def test_failures_the_proxy_counted_before_its_first_scrape_are_counted(tmp_path: Path) -> None:
    """A failure series is born at the pool's first failure. When a whole burst of failures
    comes before Prometheus first sees the series (between two scrapes), ``increase()`` reads
    the series as flat, 0 failures; the gate counts a series born in the window whole, so the
    canary's error rate is exactly the proxy's own count of failures per request."""
    (tmp_path / "proxy").mkdir()
    litellm = LiteLLMService(tmp_path / "proxy")  # its own: every series is born in this test
    try:
        litellm.start()
        litellm.router().set_weight(50)
        litellm.route(session_ids(40, seed=44))
        litellm.replicas["canary"].set_faults(timeout_rate=1.0)
        answers = litellm.route(session_ids(40, seed=45))
        litellm.replicas["canary"].clear_faults()
        counted = _canary_counts(litellm)
        with _scraping(litellm, tmp_path) as prometheus:
            prometheus.wait_scrapes(3)
            rate = _source(prometheus).measure("error_rate", "canary", WINDOW, datetime.now(UTC))
    finally:
        litellm.close()
    assert any(a.startswith("HTTP") for a in answers)
    failures, requests = counted["failure_responses"], counted["total_requests"]
    assert failures > 0
    assert rate.samples == requests
    assert rate.value == pytest.approx(failures / requests)


def _canary_counts(litellm: LiteLLMService) -> dict[str, float]:
    """The proxy's own failure and request counts for the canary deployment (its /metrics)."""
    with urlopen(f"{litellm.url}/metrics/", timeout=10) as answer:
        text = answer.read().decode()
    counts = {"failure_responses": 0.0, "total_requests": 0.0}
    canary = next(ident for ident, pool in DEPLOYMENTS.items() if pool == "canary")
    for family in text_string_to_metric_families(text):
        name = family.name.removeprefix("litellm_deployment_")
        for sample in family.samples:
            if (
                name in counts
                and sample.name.endswith("_total")
                and (sample.labels.get("model_id") == canary)
            ):
                counts[name] += sample.value
    return counts
