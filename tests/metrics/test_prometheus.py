"""PrometheusMetrics: signals read from a real Prometheus, and every way an answer can be
unusable (from a small server that answers as the Prometheus HTTP API does) made inconclusive.

The real Prometheus scrapes a tiny exporter every second whose counters grow by fixed steps
per scrape, so ratios and histogram quantiles have exact expected values.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutd.core.plan import Plan
from rolloutd.drivers import PlanDrivers
from rolloutd.errors import PermanentError
from rolloutd.gates.base import Measurement, MeasurementError
from rolloutd.httpserve import QuietServer
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import load_templates, parse_templates
from rolloutd.planfile import parse_plan
from tests.e2e.services import PrometheusService
from tests.metrics.exporter import TextExporter
from tests.plans import example_dict
from tests.routers.services import find_binary, free_port

WINDOW = timedelta(seconds=10)


# --- a small HTTP server for the answers a real Prometheus rarely gives --------------------


class FakePrometheus:
    """Answers ``/api/v1/query`` from a table keyed by the metric name the query mentions."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, Any, float]] = {}
        self.seen: list[dict[str, str]] = []
        self.now: Callable[[], float] = time.time
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                fake.seen.append(params)
                status, body, delay = fake.lookup(params.get("query", ""))
                time.sleep(delay)
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lookup(self, query: str) -> tuple[int, Any, float]:
        if query.startswith("max(timestamp(") and "timestamp" not in self.answers:
            # The freshness check: every series was scraped just now, unless a test says so.
            return 200, vector(({}, f"{self.now():.3f}")), 0.0
        for name, answer in self.answers.items():
            if f"{name}{{" in query:
                return answer
        return 200, vector(), 0.0

    def answer(self, name: str, body: Any, status: int = 200, delay: float = 0.0) -> None:
        """Answer queries that select metric ``name`` with ``body``."""
        self.answers[name] = (status, body, delay)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
    """A successful instant-vector answer."""
    result = [{"metric": labels, "value": [1700000000.0, value]} for labels, value in series]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def one(value: str, **labels: str) -> dict[str, Any]:
    """An instant vector of one series."""
    return vector((labels, value))


FAKE_SIGNALS = {
    "rate": {"kind": "ratio", "query": 'r_value{p="{pool}"}', "samples": 'r_samples{p="{pool}"}'},
    "events": {
        "kind": "events",
        "query": 'e_value{p="{pool}"}',
        "samples": 'e_samples{p="{pool}"}',
    },
    "ttft": {
        "kind": "quantile",
        "q": 0.95,
        "scale": 0.001,
        "query": 'histogram_quantile(0.95, t_value{p="{pool}"})',
        "samples": 't_samples{p="{pool}"}',
        "buckets": 't_buckets{p="{pool}"}',
    },
    "level": {"kind": "gauge", "query": 'max_over_time(g_value{p="{pool}"}[{window}])'},
}


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    """A fake Prometheus API on a free port."""
    server = FakePrometheus()
    yield server
    server.close()


def source_for(url: str, timeout: float = 2.0) -> PrometheusMetrics:
    """A source over the fake signals."""
    templates = parse_templates(yaml.safe_dump({"signals": FAKE_SIGNALS}), "fake.yaml")
    return PrometheusMetrics(url, templates, timeout=timedelta(seconds=timeout))


def measure_now(source: PrometheusMetrics, signal: str, pool: str = "canary") -> Measurement:
    """``signal`` on ``pool`` over the window that ends now."""
    return source.measure(signal, pool, WINDOW, datetime.now(UTC))  # type: ignore[arg-type]


def inconclusive(source: PrometheusMetrics, signal: str, pool: str = "canary") -> MeasurementError:
    """The error measuring ``signal`` raises (fails the test if it returns a value)."""
    with pytest.raises(MeasurementError) as caught:
        source.measure(signal, pool, WINDOW, datetime.now(UTC))  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize("text", ["NaN", "+Inf", "-Inf"])
def test_nan_and_infinities_are_inconclusive(fake: FakePrometheus, text: str) -> None:
    """A non-finite value is never a measurement; the reason shows it and the query."""
    fake.answer("g_value", one(text))
    error = inconclusive(source_for(fake.url), "level")
    assert text in error.reason
    assert error.query == 'max_over_time(g_value{p="canary"}[10s])'


def test_an_empty_answer_is_inconclusive_and_names_the_absent_series(fake: FakePrometheus) -> None:
    """No series at all (a metric never scraped) is not zero: the reason names the series."""
    fake.answer("g_value", vector())
    error = inconclusive(source_for(fake.url), "level")
    assert 'no series for g_value{p="canary"}: Prometheus has no g_value at all' in error.reason


def test_a_ratio_over_no_traffic_says_so(fake: FakePrometheus) -> None:
    """0 events / 0 requests is NaN: inconclusive, and the reason says there was no traffic."""
    fake.answer("r_value", one("NaN"))
    fake.answer("r_samples", one("0"))
    assert (
        "no traffic in the window (0 samples)" in inconclusive(source_for(fake.url), "rate").reason
    )


def test_a_promql_error_is_inconclusive_with_prometheus_message(fake: FakePrometheus) -> None:
    """HTTP 422 with the API's error body: the reason carries Prometheus's own words."""
    body = {
        "status": "error",
        "errorType": "execution",
        "error": 'found duplicate series for the match group {pool="canary"}',
    }
    fake.answer("g_value", body, status=422)
    error = inconclusive(source_for(fake.url), "level")
    assert "HTTP 422" in error.reason
    assert 'duplicate series for the match group {pool="canary"}' in error.reason


def test_a_hanging_prometheus_times_out_inconclusive(fake: FakePrometheus) -> None:
    """An answer slower than the plan's timeout is abandoned, not waited for."""
    fake.answer("g_value", one("0.5"), delay=3.0)
    started = time.monotonic()
    error = inconclusive(source_for(fake.url, timeout=0.5), "level")
    assert time.monotonic() - started < 2.5
    assert "did not answer within 0.5s" in error.reason


def test_an_answer_that_is_not_the_api_json_is_inconclusive(fake: FakePrometheus) -> None:
    """A 200 from a proxy's error page is not data."""
    fake.answer("g_value", b"<html>502 Bad Gateway</html>")
    assert "other than its JSON API" in inconclusive(source_for(fake.url), "level").reason


def test_several_series_are_refused_rather_than_picked_from(fake: FakePrometheus) -> None:
    """A query that forgot to aggregate returns one series per replica: inconclusive."""
    fake.answer("g_value", vector(({"instance": "a"}, "0.1"), ({"instance": "b"}, "0.9")))
    assert "returned 2 series, expected one" in inconclusive(source_for(fake.url), "level").reason


def test_a_range_vector_answer_is_refused(fake: FakePrometheus) -> None:
    """Templates must be instant queries; a matrix answer says what is wrong."""
    matrix = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"]]}]},
    }
    fake.answer("g_value", matrix)
    assert "not an instant vector" in inconclusive(source_for(fake.url), "level").reason


def test_a_scalar_answer_is_a_value(fake: FakePrometheus) -> None:
    """``scalar(...)`` answers [time, value] rather than a vector; both are read."""
    fake.answer(
        "g_value", {"status": "success", "data": {"resultType": "scalar", "result": [1, "0.25"]}}
    )
    assert measure_now(source_for(fake.url), "level").value == 0.25


def test_queries_are_evaluated_at_the_callers_now_with_the_timeout(fake: FakePrometheus) -> None:
    """``time`` is the ``now`` given (a scaled or fake clock), ``timeout`` the plan's."""
    fake.answer("g_value", one("0.3"))
    now = datetime(2025, 3, 3, 9, 0, 0, 250000, tzinfo=UTC)
    source_for(fake.url, timeout=4).measure("level", "stable", WINDOW, now)
    assert fake.seen[-1]["time"] == f"{now.timestamp():.3f}"
    assert fake.seen[-1]["timeout"] == "4s"
    assert fake.seen[-1]["query"] == 'max_over_time(g_value{p="stable"}[10s])'


def test_event_counts_are_whole_numbers_and_the_raw_value_is_kept(fake: FakePrometheus) -> None:
    """increase() extrapolates (2.6 events); an event count is rounded, the raw kept."""
    fake.answer("e_value", one("2.6"))
    fake.answer("e_samples", one("419.7"))
    measured = measure_now(source_for(fake.url), "events")
    assert (measured.value, measured.samples) == (3.0, 420)
    assert measured.raw["value"] == 2.6
    assert measured.raw["queries"] == {"samples": 'e_samples{p="canary"}'}


def test_a_millisecond_histogram_is_read_in_seconds(fake: FakePrometheus) -> None:
    """``scale`` turns the quantile and the bucket bounds into seconds; +Inf stays +Inf."""
    fake.answer("t_value", one("750"))
    fake.answer("t_samples", one("100"))
    fake.answer(
        "t_buckets",
        vector(({"le": "+Inf"}, "100"), ({"le": "500"}, "40"), ({"le": "1000"}, "100")),
    )
    measured = measure_now(source_for(fake.url), "ttft")
    assert measured.value == pytest.approx(0.75)
    assert measured.raw["buckets"] == [["0.5", 40.0], ["1", 100.0], ["+Inf", 100.0]]


def test_a_quantile_beyond_the_last_bucket_is_inconclusive(fake: FakePrometheus) -> None:
    """histogram_quantile would answer the last finite bound, a floor: never pass on it."""
    fake.answer("t_value", one("1000"))
    fake.answer("t_samples", one("100"))
    fake.answer("t_buckets", vector(({"le": "1000"}, "90"), ({"le": "+Inf"}, "100")))
    error = inconclusive(source_for(fake.url), "ttft")
    assert "above the histogram's last finite bucket (1)" in error.reason


def test_an_unknown_signal_is_inconclusive_naming_it_and_the_file(fake: FakePrometheus) -> None:
    """A gate naming a signal the templates lack says which, and what the file defines."""
    error = inconclusive(source_for(fake.url), "queue_timeout_rate")
    assert "no signal 'queue_timeout_rate' in fake.yaml" in error.reason
    assert "events, level, rate, ttft" in error.reason
    assert fake.seen == []


def test_a_refused_connection_is_inconclusive_and_hides_credentials() -> None:
    """Nothing listening: the reason names the connection, never the URL's password."""
    port = free_port()
    templates = parse_templates(yaml.safe_dump({"signals": FAKE_SIGNALS}), "fake.yaml")
    source = PrometheusMetrics(f"http://ops:s3cret@127.0.0.1:{port}", templates)
    error = inconclusive(source, "level")
    assert (
        error.reason
        == f"cannot connect to Prometheus at http://127.0.0.1:{port}: connection refused"
    )
    assert "s3cret" not in error.reason


def test_a_bad_pool_label_or_timeout_is_refused_up_front() -> None:
    """The source is not built with a label name PromQL cannot take or a zero timeout."""
    templates = load_templates("vllm")
    with pytest.raises(ValueError, match="pool_label"):
        PrometheusMetrics("http://127.0.0.1:9", templates, pool_label="pool-name")
    with pytest.raises(ValueError, match="timeout"):
        PrometheusMetrics("http://127.0.0.1:9", templates, timeout=timedelta(0))


# --- a real Prometheus ------------------------------------------------------------------


class Exporter(TextExporter):
    """Counters that grow by fixed steps per scrape: /canary, /stable (engines), /gateway."""

    def __init__(self) -> None:
        self.started = {"canary": 1000.0, "stable": 1000.0}
        super().__init__(self.render)

    def render(self, path: str, n: int) -> str:
        if path == "gateway":
            return "\n".join(
                [
                    "# TYPE agent_tool_calls_total counter",
                    f'agent_tool_calls_total{{pool="canary"}} {100 * n}',
                    f'agent_tool_calls_total{{pool="stable"}} {100 * n}',
                    "# TYPE agent_schema_violations_total counter",
                    f'agent_schema_violations_total{{pool="canary"}} {10 * n}',
                    'agent_schema_violations_total{pool="stable"} 0',
                    "",
                ]
            )
        usage = 0.42 if path == "canary" else 0.2
        return "\n".join(
            [
                "# TYPE vllm:e2e_request_latency_seconds histogram",
                f'vllm:e2e_request_latency_seconds_bucket{{le="1.0"}} {8 * n}',
                f'vllm:e2e_request_latency_seconds_bucket{{le="2.0"}} {10 * n}',
                f'vllm:e2e_request_latency_seconds_bucket{{le="+Inf"}} {10 * n}',
                f"vllm:e2e_request_latency_seconds_count {10 * n}",
                f"vllm:e2e_request_latency_seconds_sum {12 * n}",
                "# TYPE vllm:request_prompt_tokens histogram",
                f'vllm:request_prompt_tokens_bucket{{le="1000.0"}} {5 * n}',
                f'vllm:request_prompt_tokens_bucket{{le="+Inf"}} {10 * n}',
                f"vllm:request_prompt_tokens_count {10 * n}",
                f"vllm:request_prompt_tokens_sum {60000 * n}",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                f"vllm:kv_cache_usage_perc {usage}",
                "# TYPE process_start_time_seconds gauge",
                f"process_start_time_seconds {self.started[path]}",
                "",
            ]
        )


class RealPrometheus(PrometheusService):
    """Debian's prometheus scraping the exporter: /canary and /stable with a pool label."""

    def __init__(self, directory: Path, binary: str, exporter: Exporter) -> None:
        super().__init__(directory, binary, replicas=[], gateway_url=exporter.url)
        host = exporter.url.split("://")[1]
        config = json.loads(self.config.read_text())
        config["scrape_configs"] = [
            {
                "job_name": pool,
                "metrics_path": f"/{pool}",
                "static_configs": [{"targets": [host], "labels": {"pool": pool}}],
            }
            for pool in ("canary", "stable")
        ] + [
            {
                "job_name": "gateway",
                "metrics_path": "/gateway",
                "static_configs": [{"targets": [host]}],
            }
        ]
        self.config.write_text(json.dumps(config))
        self.expected_targets = 3


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealPrometheus, Exporter]]:
    """A real prometheus and its exporter for the module, with a few scrapes behind it."""
    binary = find_binary("prometheus")
    exporter = Exporter()
    service = RealPrometheus(tmp_path_factory.mktemp("prometheus"), binary, exporter)
    try:
        service.start()
        service.wait_targets_up()
        yield service, exporter
    finally:
        service.stop()
        exporter.close()


def eventually(measure: Callable[[], Measurement], timeout: float = 15.0) -> Measurement:
    """Measure until the data is there (the first scrapes take a few seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return measure()
        except MeasurementError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def vllm_source(
    service: PrometheusService, overrides: dict[str, str] | None = None
) -> PrometheusMetrics:
    """A source over the shipped vLLM templates."""
    return PrometheusMetrics(service.url, load_templates("vllm").with_overrides(overrides or {}))


@pytest.fixture
def source(real: tuple[RealPrometheus, Exporter]) -> PrometheusMetrics:
    """A source over the shipped vLLM templates on the real Prometheus."""
    return vllm_source(real[0])


@pytest.mark.slow
def test_a_ratio_from_real_prometheus_is_exact_with_its_samples_and_query(
    source: PrometheusMetrics,
) -> None:
    """10 violations per 100 tool calls is 0.1 however increase() extrapolates both."""
    measured = eventually(lambda: measure_now(source, "schema_violation_rate"))
    assert measured.value == pytest.approx(0.1, abs=1e-9)
    assert measured.samples is not None and measured.samples >= 100
    assert 'agent_schema_violations_total{pool="canary"}[10s]' in (measured.query or "")
    assert "agent_tool_calls_total" in measured.raw["queries"]["samples"]
    stable = measure_now(source, "schema_violation_rate", "stable")
    assert stable.value == 0.0


@pytest.mark.slow
def test_a_latency_quantile_comes_with_its_buckets(source: PrometheusMetrics) -> None:
    """p95 of 80% <= 1 s, 20% in (1, 2] s is 1.75 s; the buckets are the window's increases."""
    measured = eventually(lambda: measure_now(source, "e2e_latency"))
    assert measured.value == pytest.approx(1.75, abs=1e-9)
    (le1, c1), (le2, c2), (inf, total) = measured.raw["buckets"]
    assert (le1, le2, inf) == ("1", "2", "+Inf")
    assert c1 == pytest.approx(0.8 * total) and c2 == pytest.approx(total)
    assert measured.samples == round(total)


@pytest.mark.slow
def test_gauges_and_restart_counts_from_real_prometheus(
    real: tuple[RealPrometheus, Exporter],
) -> None:
    """KV usage is the window's peak; a new process start time on the canary is one OOM."""
    service, exporter = real
    source = vllm_source(service)
    now = datetime.now(UTC)
    assert eventually(lambda: source.measure("kv_cache_usage", "canary", WINDOW, now)).value == 0.42
    assert measure_now(source, "oom_events").value == 0
    exporter.started["canary"] = 2000.0
    restarted = eventually(lambda: _must(measure_now(source, "oom_events"), 1.0))
    assert restarted.value == 1.0
    assert measure_now(source, "oom_events", "stable").value == 0


def _must(measured: Measurement, value: float) -> Measurement:
    if measured.value != value:
        raise MeasurementError(f"not yet {value}")
    return measured


@pytest.mark.slow
def test_a_hostile_pool_value_selects_nothing_on_real_prometheus(
    source: PrometheusMetrics,
) -> None:
    """``canary"} or vector(1) or {x="`` is one label value that matches no series."""
    eventually(lambda: measure_now(source, "kv_cache_usage"))
    hostile = 'canary"} or vector(1) or {x="'
    error = inconclusive(source, "kv_cache_usage", hostile)
    assert "no series for" in error.reason and "not on the" in error.reason


@pytest.mark.slow
def test_real_prometheus_is_asked_about_the_given_now(
    source: PrometheusMetrics,
) -> None:
    """An hour before the first scrape there is no data, though there is data now."""
    eventually(lambda: measure_now(source, "kv_cache_usage"))
    with pytest.raises(MeasurementError, match="no series for"):
        source.measure("kv_cache_usage", "canary", WINDOW, datetime.now(UTC) - timedelta(hours=1))


@pytest.mark.slow
def test_a_prompt_p99_past_the_last_bucket_is_inconclusive_on_real_prometheus(
    source: PrometheusMetrics,
) -> None:
    """Half the prompts above the 1,000-token bucket: the p99 is unknown, not 1,000."""
    error = eventually_error(lambda: measure_now(source, "prompt_tokens_p99"))
    assert "last finite bucket (1000)" in error.reason


def eventually_error(measure: Callable[[], Measurement], timeout: float = 15.0) -> MeasurementError:
    """Wait for the data, then return the error the measurement raises on it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            measure()
        except MeasurementError as exc:
            waiting = ("no data", "no series", "no fresh")
            if not any(w in exc.reason for w in waiting) or time.monotonic() > deadline:
                return exc
        else:
            raise AssertionError("the measurement returned a value")
        time.sleep(0.25)


@pytest.mark.slow
def test_a_bad_override_gets_prometheus_parse_error(real: tuple[RealPrometheus, Exporter]) -> None:
    """A plan's override that is not PromQL is inconclusive with Prometheus's HTTP 400."""
    source = vllm_source(real[0], {"kv_cache_usage": 'max(vllm:kv_cache_usage_perc{pool="{pool}"}'})
    error = inconclusive(source, "kv_cache_usage")
    assert error.reason.startswith(f"Prometheus at {real[0].url} answered HTTP 400: ")
    assert "parse error" in error.reason


@pytest.mark.slow
def test_an_operator_adds_a_signal_with_yaml_alone(
    real: tuple[RealPrometheus, Exporter], tmp_path: Path
) -> None:
    """A new entry in a template file is a signal the source measures, no Python needed."""
    path = tmp_path / "ours.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "signals": {
                    "tool_calls": {
                        "kind": "count",
                        "query": 'sum(increase(agent_tool_calls_total{pool="{pool}"}[{window}]))',
                    }
                }
            }
        )
    )
    source = PrometheusMetrics(real[0].url, load_templates(str(path)))
    measured = eventually(lambda: measure_now(source, "tool_calls", "stable"))
    assert measured.value >= 100 and measured.value == math.floor(measured.value)


@pytest.mark.slow
def test_a_stopped_prometheus_is_inconclusive_naming_the_connection(tmp_path: Path) -> None:
    """Started, then stopped: the same source reports the refused connection."""
    exporter = Exporter()
    service = RealPrometheus(tmp_path, find_binary("prometheus"), exporter)
    try:
        service.start()
        source = vllm_source(service)
        service.stop()
        error = inconclusive(source, "kv_cache_usage")
        assert error.reason == f"cannot connect to Prometheus at {service.url}: connection refused"
    finally:
        service.stop()
        exporter.close()


# --- wiring ---------------------------------------------------------------------------------


def _plan(metrics: dict[str, object]) -> Plan:
    data = example_dict()
    data["metrics"] = metrics
    return parse_plan(yaml.safe_dump(data), "plan.yaml").plan


def test_a_prometheus_plan_gets_a_prometheus_source_with_its_overrides() -> None:
    """``source: prometheus`` builds the source from the named templates, overrides applied
    (a string replaces the query; a mapping may replace the samples query too), with the
    plan's label names, model and scrape interval."""
    override = 'max(my_kv{pool="{pool}"})'
    samples = 'sum(increase(my_requests_total{pool="{pool}"}[{window}]))'
    plan = _plan(
        {
            "source": "prometheus",
            "url": "http://127.0.0.1:9",
            "templates": "triton-trtllm",
            "pool_label": "fleet_pool",
            "gateway_pool_label": "rollout_pool",
            "model": "ensemble",
            "scrape_interval": "30s",
            "timeout": "3s",
            "overrides": {
                "kv_cache_usage": override,
                "queue_timeout_rate": {"samples": samples},
            },
        }
    )
    source = PlanDrivers().metrics(1, plan)
    assert isinstance(source, PrometheusMetrics)
    assert source.templates.source.endswith("gates/triton-trtllm.yaml")
    assert source.templates.signals["kv_cache_usage"].query == override
    assert source.templates.signals["queue_timeout_rate"].samples == samples
    assert (source.pool_label, source.timeout) == ("fleet_pool", 3.0)
    assert (source.labels.gateway_pool_label, source.labels.model) == ("rollout_pool", "ensemble")
    assert source.stale_after == timedelta(seconds=60)


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"templates": "no-such-stack"}, "no such template file"),
        ({"templates": "vllm", "overrides": {"made_up": 'x{pool="{pool}"}'}}, "made_up"),
        ({"templates": "vllm", "pool_label": "pool-name"}, "pool_label"),
        ({}, "metrics.templates is required"),
    ],
)
def test_templates_that_cannot_serve_the_plan_are_a_permanent_error(
    metrics: dict[str, object], message: str
) -> None:
    """The daemon makes every gate inconclusive with this message instead of guessing.

    ``plan validate`` refuses such plans; a stored plan meets them when its template file
    changed after it started, so the plan here is checked for structure only.
    """
    data = example_dict()
    data["metrics"] = {"source": "prometheus", "url": "http://127.0.0.1:9", **metrics}
    plan = Plan.model_validate(data)
    with pytest.raises(PermanentError, match=message):
        PlanDrivers().metrics(1, plan)


def test_the_cli_and_the_drivers_module_do_not_import_the_prometheus_client() -> None:
    """rolloutctl starts without prometheus_api_client (or requests) loaded."""
    code = (
        "import sys, rolloutd.cli.ctl, rolloutd.drivers, rolloutd.metrics.templates; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('prometheus_api_client', 'requests')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
