"""Every shipped template against the engines' own metrics: answers on the versions it
claims, says *absent* on the others, and never passes on a series that does not exist.

The captures in ``tests/fixtures/metrics/`` (see their SOURCES.md) are served to Debian's
prometheus, each as a canary and a stable target, with every counter and histogram grown at
each scrape (so rates over a window are real rates) and gauges kept as captured. The agent
gateway's series come from the reference exporter (``rolloutd.gateway``). Each capture's
targets carry their own pool label, so one Prometheus holds them all and a plan picks a
capture by its ``pool_label``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rolloutd.gates.base import MeasurementError
from rolloutd.gateway import GatewayMetrics
from rolloutd.metrics.prometheus import PrometheusMetrics
from rolloutd.metrics.templates import Labels, load_templates
from tests.e2e.services import PrometheusService
from tests.metrics.exporter import TextExporter
from tests.routers.services import find_binary

pytestmark = pytest.mark.slow

CAPTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
CAPTURES = sorted(p.stem for p in CAPTURES_DIR.glob("*.prom"))
TEMPLATES = ("vllm", "vllm-v0", "triton-trtllm", "triton-trtllm-legacy")
WINDOW = timedelta(seconds=20)
# Why a claimed signal may still not be a number on a capture: the captured histogram
# cannot hold the quantile (the backend's token buckets stop at 1,000 tokens; the captures'
# prompts are ~5,200), which the source reports as such -- never as a value.
NOT_A_NUMBER_BY_DESIGN = ("lies above the histogram's last finite bucket",)

_TYPE = re.compile(r"^# TYPE (\S+) (\S+)")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)(.*)$")


def slug(capture: str) -> str:
    """The pool label name a capture's targets carry."""
    return "pool_" + re.sub(r"[^A-Za-z0-9]", "_", capture)


def grown(text: str, n: int) -> str:
    """``text`` with every counter and histogram sample times ``n``; gauges as they are."""
    kinds: dict[str, str] = {}
    lines = []
    for line in text.splitlines():
        typed = _TYPE.match(line)
        if typed:
            kinds[typed.group(1)] = typed.group(2)
        sample = _SAMPLE.match(line)
        if sample is None or line.startswith("#"):
            lines.append(line)
            continue
        name, labels, value, rest = sample.groups()
        family = next(
            (f for f in (name, *(name.removesuffix(s) for s in _SUFFIXES)) if f in kinds), name
        )
        cumulative = kinds.get(family) in ("counter", "histogram", "summary")
        if cumulative and not name.endswith("_created"):
            value = repr(float(value) * n)
        lines.append(f"{name}{labels or ''} {value}{rest}")
    return "\n".join(lines) + "\n"


_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def gateway_text() -> str:
    """The reference exporter after some traffic on both pools, in named sessions of 15
    requests, so the once-per-session counters count too (3 sessions each per pool)."""
    metrics = GatewayMetrics(CollectorRegistry())
    for pool in ("canary", "stable"):
        for i in range(200):
            session = f"{pool}-{i // 15}"
            if i % 15 == 0:
                metrics.session_started(pool, session=session)
            metrics.tool_call(pool, schema_ok=i % 97 != 0, session=session)
            outcome = "timeout" if i % 80 == 0 else "ok"
            metrics.request_finished(
                pool,
                outcome=outcome,
                duration_s=2.0 + (i % 7),
                prompt_tokens=5000 + i,
                output_tokens=300,
                session=session,
            )
    return generate_latest(metrics.registry).decode()


class Captures(TextExporter):
    """Serves ``/<capture>/<pool>`` and ``/gateway``, grown at every scrape."""

    def __init__(self) -> None:
        self.texts = {c: (CAPTURES_DIR / f"{c}.prom").read_text() for c in CAPTURES}
        self.texts["gateway"] = gateway_text()
        super().__init__(lambda path, n: grown(self.texts[path.split("/")[0]], n))


class Scraping(PrometheusService):
    """Prometheus with a canary and a stable target per capture, and the gateway."""

    def __init__(self, directory: Path, captures: Captures) -> None:
        gateway = f"http://{captures.host}"
        super().__init__(directory, find_binary("prometheus"), replicas=[], gateway_url=gateway)
        config = json.loads(self.config.read_text())
        jobs = [
            {
                "job_name": f"{capture}-{pool}",
                "metrics_path": f"/{capture}/{pool}",
                "static_configs": [{"targets": [captures.host], "labels": {slug(capture): pool}}],
            }
            for capture in CAPTURES
            for pool in ("canary", "stable")
        ]
        gateway_job = {
            "job_name": "gateway",
            "metrics_path": "/gateway",
            "static_configs": [{"targets": [captures.host]}],
        }
        config["scrape_configs"] = [*jobs, gateway_job]
        # Subqueries (the legacy KV-cache ratio) step at the evaluation interval: keep it at
        # the scrape interval so a 20 s window holds several steps a few seconds in.
        config["global"]["evaluation_interval"] = "1s"
        self.config.write_text(json.dumps(config))
        self.expected_targets = len(jobs) + 1


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraping]:
    """One Prometheus for the module, a few scrapes in."""
    captures = Captures()
    service = Scraping(tmp_path_factory.mktemp("captures"), captures)
    try:
        service.start()
        service.wait_targets_up()
        service.wait_scrapes(4)
        yield service
    finally:
        service.stop()
        captures.close()


def outcome(prometheus: Scraping, template: str, capture: str, signal: str) -> str:
    """``ok`` (a finite number), ``absent: ...`` or ``error: ...`` for one signal."""
    source = PrometheusMetrics(
        prometheus.url,
        load_templates(template),
        labels=Labels(pool_label=slug(capture), model="ensemble"),
        scrape_interval=timedelta(seconds=1),
    )
    try:
        measured = source.measure(signal, "canary", WINDOW, datetime.now(UTC))
    except MeasurementError as exc:
        kind = "absent" if exc.reason.startswith("no series for") else "error"
        return f"{kind}: {exc.reason}"
    assert math.isfinite(measured.value)
    return "ok"


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_template_answers_every_signal_on_the_versions_it_claims(
    prometheus: Scraping, template: str
) -> None:
    """On each capture the template was checked on, every signal is a finite number (or a
    histogram that cannot hold the quantile, said as such), except the ones the file says
    that version lacks, which are absent."""
    templates = load_templates(template)
    assert templates.checked_on, f"{template} claims no engine version"
    failures = {}
    for capture in templates.checked_on:
        assert capture in CAPTURES, f"{template} claims {capture}, which has no capture"
        for name, signal in templates.signals.items():
            found = outcome(prometheus, template, capture, name)
            if capture in signal.missing_on:
                if not found.startswith("absent"):
                    failures[(capture, name)] = f"documented as missing, but: {found}"
            elif found != "ok" and not any(r in found for r in NOT_A_NUMBER_BY_DESIGN):
                failures[(capture, name)] = found
    assert failures == {}


@pytest.mark.parametrize("template", TEMPLATES)
def test_on_other_versions_a_signal_answers_or_says_absent(
    prometheus: Scraping, template: str
) -> None:
    """On captures the template does not claim, a signal is a finite number from series
    that exist, or says which series is absent: never a number made up for a missing one."""
    templates = load_templates(template)
    absent = 0
    for capture in (c for c in CAPTURES if c not in templates.checked_on):
        for signal in templates.signals:
            found = outcome(prometheus, template, capture, signal)
            assert (
                found == "ok"
                or found.startswith("absent")
                or any(r in found for r in NOT_A_NUMBER_BY_DESIGN)
            ), (capture, signal, found)
            absent += found.startswith("absent")
    assert absent > 0  # every template meets engines it cannot read


@pytest.mark.parametrize(
    ("template", "capture", "signal", "named"),
    [
        ("triton-trtllm", "triton-24.05-trtllm-0.9", "queue_timeouts", 'reason="REJECTED"'),
        ("triton-trtllm", "triton-24.05-trtllm-0.9", "kv_cache_usage", 'type="fraction"'),
        ("vllm", "vllm-0.6.3-v0", "kv_cache_usage", "vllm:kv_cache_usage_perc"),
        ("vllm-v0", "vllm-0.6.3-v0", "queue_time", "vllm:request_queue_time_seconds"),
    ],
)
def test_the_version_gaps_the_templates_document_are_named(
    prometheus: Scraping, template: str, capture: str, signal: str, named: str
) -> None:
    """The known gaps between engine versions come back as absent, naming the series."""
    found = outcome(prometheus, template, capture, signal)
    assert found.startswith("absent") and named in found, found
