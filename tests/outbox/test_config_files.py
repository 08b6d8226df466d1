"""The Prometheus alerting rules and the Grafana dashboard speak of metrics rolloutd exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from rolloutd.daemon.metrics import DaemonMetrics
from tests.outbox.harness import T0, Harness
from tests.routers.services import find_binary

if TYPE_CHECKING:
    from conftest import StoreHandle

CONFIG = Path(__file__).resolve().parents[2] / "config"
RULES = CONFIG / "prometheus" / "rolloutd-alerts.yml"
DASHBOARD = CONFIG / "grafana" / "rolloutd-dashboard.json"
METRIC = re.compile(r"\brolloutd_[a-z_]+")


def _exported(store: StoreHandle) -> set[str]:
    """Every sample name rolloutd's /metrics serves with one rollout mid-flight."""
    h = Harness(store, {})
    h.tick()
    h.tick(seconds=5)
    metrics = DaemonMetrics(store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    with metrics.ticking():
        pass
    metrics.delivered("sent")
    body, _ = metrics.exposition()
    return {
        sample.name
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def _description(alert: str) -> str:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return str(next(r for r in rules if r["alert"] == alert)["annotations"]["description"])


def _quiet(alert: str, at: str) -> dict[str, Any]:
    """A rule-test expectation: ``alert`` does not fire at ``at``."""
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


def _fires(alert: str, at: str, summary: str, **labels: str) -> dict[str, Any]:
    """A rule-test expectation: ``alert`` fires at ``at`` with ``labels`` and ``summary``."""
    annotations = {"summary": summary, "description": _description(alert)}
    expected = {"exp_labels": labels, "exp_annotations": annotations}
    return {"eval_time": at, "alertname": alert, "exp_alerts": [expected]}


def _promtool(*args: str) -> None:
    """Run promtool with ``args``; it must succeed."""
    result = subprocess.run(
        [find_binary("promtool"), *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _rule_test(
    tmp_path: Path, input_series: list[dict[str, str]], alert_rule_test: list[dict[str, Any]]
) -> None:
    """promtool's rule unit test of the rule file: given ``input_series`` scraped every 15s,
    the alerts are as ``alert_rule_test`` expects."""
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {"interval": "15s", "input_series": input_series, "alert_rule_test": alert_rule_test}
        ],
    }
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(tests))
    _promtool("test", "rules", str(path))


def test_the_rules_pass_promtool_check(tmp_path: Path) -> None:
    """promtool accepts the rule file."""
    _promtool("check", "rules", str(RULES))


def test_the_rules_fire_when_nobody_leads_and_when_the_outbox_is_stuck(tmp_path: Path) -> None:
    """promtool's rule unit test: no leader for a minute fires; a leader does not; an outbox
    whose oldest alert ages past five minutes fires."""
    _rule_test(
        tmp_path,
        [
            {"series": 'rolloutd_leader{daemon="a",instance="h1:9467"}', "values": "1x4 0x12"},
            {"series": 'rolloutd_leader{daemon="b",instance="h2:9467"}', "values": "0x16"},
            {
                "series": 'rolloutd_outbox_oldest_pending_age_seconds{instance="h1:9467"}',
                "values": "0+15x40",
            },
        ],
        [
            _quiet("RolloutdNotLeading", "1m"),
            _fires(
                "RolloutdNotLeading",
                "3m",
                "No rolloutd instance holds the leader lease",
                severity="critical",
            ),
            _quiet("RolloutdOutboxStuck", "6m"),
            _fires(
                "RolloutdOutboxStuck",
                "8m",
                "rolloutd alerts have waited 8m 0s for Slack",
                severity="critical",
            ),
        ],
    )


def test_a_rollback_for_missing_data_fires_its_own_alert(tmp_path: Path) -> None:
    """promtool's rule unit test: a rollback counted with cause no_data fires the warning for
    its rollout; a rollback for a breached gate does not."""
    labels = 'rollout="7",service="atlas-70b",environment="production"'
    _rule_test(
        tmp_path,
        [
            {
                "series": f'rolloutd_rollbacks_total{{cause="no_data",{labels}}}',
                "values": "0x8 1x20",
            },
            {"series": f'rolloutd_rollbacks_total{{cause="gate",{labels}}}', "values": "0x28"},
            {
                "series": 'rolloutd_rollbacks_total{cause="gate",rollout="8",'
                'service="atlas-70b",environment="staging"}',
                "values": "0x8 1x20",
            },
        ],
        [
            _quiet("RolloutdRolledBackForMissingData", "1m"),
            _fires(
                "RolloutdRolledBackForMissingData",
                "3m",
                "atlas-70b (production): rollout 7 rolled back for missing data",
                severity="warning",
                rollout="7",
                service="atlas-70b",
                environment="production",
            ),
        ],
    )


def test_rules_and_dashboard_name_only_metrics_rolloutd_exports(store: StoreHandle) -> None:
    """Every rolloutd_* name in the rules and the dashboard is served by /metrics."""
    exported = _exported(store)
    rules = yaml.safe_load(RULES.read_text())
    rule_names = {
        name for rule in rules["groups"][0]["rules"] for name in METRIC.findall(rule["expr"])
    }
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    dash_names = {name for expr in exprs for name in METRIC.findall(expr)}
    assert rule_names and dash_names
    assert rule_names - exported == set()
    assert dash_names - exported == set()
    # The dashboard shows the engines' signals too, for both serving stacks.
    assert any("vllm:" in e for e in exprs) and any("nv_trt_llm_" in e for e in exprs)


def test_metrics_report_the_rollout_gates_and_outbox(store: StoreHandle) -> None:
    """A scrape reports the rollout's state, step and weight, each gate's value and verdict,
    and the outbox depth and the age of its oldest message."""
    h = Harness(store, {})
    h.tick()
    h.metrics.set("queue_timeout_rate", "canary", 0.062, samples=900)
    h.tick(seconds=5)  # breach: a rollback and two alerts for Slack
    h.clock.advance(seconds=42)
    metrics = DaemonMetrics(store.sessions, instance="a", wall=h.clock, leading=lambda: None)
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    rollout = (
        ("environment", "production"),
        ("name", "atlas-maxseq8192"),
        ("rollout", str(h.rollout_id)),
        ("service", "atlas-70b"),
    )
    # Rolling back, the rollback has no outcome yet: the rollback label is empty.
    state = (*rollout, ("rollback", ""))
    assert (
        samples[("rolloutd_rollout_state", tuple(sorted((*state, ("state", "rolling_back")))))] == 1
    )
    assert samples[("rolloutd_rollout_state", tuple(sorted((*state, ("state", "running")))))] == 0
    assert samples[("rolloutd_rollout_canary_weight_percent", rollout)] == 0
    assert samples[("rolloutd_rollout_step", rollout)] == 0
    # queue_timeouts gates the step and is a trigger: one evaluation serves both roles.
    gate = (("gate", "queue_timeouts"), ("role", "step+trigger"), ("rollout", str(h.rollout_id)))
    assert samples[("rolloutd_gate_value", gate)] == 0.062
    assert samples[("rolloutd_gate_verdict", tuple(sorted((*gate, ("verdict", "fail")))))] == 1
    assert samples[("rolloutd_outbox_pending", ())] == 2
    assert samples[("rolloutd_outbox_oldest_pending_age_seconds", ())] == 42
    assert samples[("rolloutd_leader", (("daemon", "a"),))] == 0
    assert samples[("rolloutd_store_up", ())] == 1
    assert T0  # the harness clock started at T0


def test_a_database_error_is_reported_not_raised(store: StoreHandle, tmp_path: Path) -> None:
    """A scrape while the database is unreachable answers rolloutd_store_up 0."""
    from rolloutd.store.db import make_engine, session_factory

    gone = session_factory(make_engine(f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"))
    metrics = DaemonMetrics(gone, instance="a", wall=lambda: T0, leading=lambda: 3)
    body, _ = metrics.exposition()
    text = body.decode()
    assert "rolloutd_store_up 0.0" in text
    assert 'rolloutd_leader{daemon="a"} 1.0' in text and "rolloutd_leader_epoch 3.0" in text
