"""The real daemon: its leader delivers alerts, and real Prometheus scrapes its /metrics.

One ``rolloutd run`` process on a Postgres test database, a Slack-like server on the real
clock, and a real ``prometheus`` scraping the daemon every second.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.daemon.helpers import FULL, WAIT, Daemons, Db, Workspace, canary, running_daemons
from tests.daemon.helpers import wait_until as wait_for
from tests.outbox.harness import SECRET
from tests.outbox.slack import SlackServer
from tests.routers.services import find_binary, free_port

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def daemons(pg_store: StoreHandle, tmp_path: Path) -> Iterator[Daemons]:
    """Daemons on the test database, all killed at teardown."""
    with running_daemons(pg_store.url, tmp_path) as pool:
        yield pool


def _alerting_plan(workspace: Workspace) -> Path:
    path = workspace.write_plan([canary(5, "1h"), FULL])
    plan = yaml.safe_load(path.read_text())
    plan["alerts"] = {
        "channels": {"ops": {"webhook_env": "SLACK_WEBHOOK_OPS"}},
        "default": ["ops"],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


class Prometheus:
    """A real prometheus scraping one target's /metrics every second."""

    def __init__(self, directory: Path, target: str) -> None:
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                    "scrape_configs": [
                        {"job_name": "rolloutd", "static_configs": [{"targets": [target]}]}
                    ],
                }
            )
        )
        self.log = (directory / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                find_binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` (empty while Prometheus is not ready)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                result: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
                return result
        except OSError:
            return []

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()


def test_the_leader_delivers_alerts_and_prometheus_scrapes_its_metrics(
    daemons: Daemons, tmp_path: Path
) -> None:
    """A breach rolls back; Slack gets the alerts from the daemon's sender; Prometheus reads
    the leader, the rollout's weight and state, and the outbox back from /metrics."""
    prometheus_binary = find_binary("prometheus")
    assert prometheus_binary
    with SlackServer(clock=lambda: datetime.now(UTC)) as slack:
        env_file = tmp_path / "rolloutd.env"
        env_file.write_text(f"SLACK_WEBHOOK_OPS={slack.webhook(SECRET)}\n")
        daemon = daemons.spawn("a", env_file=str(env_file))
        daemon.wait_role("leader", WAIT)
        db = Db(daemons.url)
        workspace = Workspace(tmp_path, "atlas")
        rollout_id = db.start_rollout(_alerting_plan(workspace))
        wait_for(lambda: workspace.router_weight() == 5, WAIT, "the canary at 5%")

        prometheus = Prometheus(tmp_path, f"127.0.0.1:{daemon.port}")
        try:
            rid = str(rollout_id)
            weight = wait_for(
                lambda: prometheus.query(
                    f'rolloutd_rollout_canary_weight_percent{{rollout="{rid}"}}'
                ),
                60,
                "Prometheus to scrape the canary weight",
            )
            assert float(weight[0]["value"][1]) == 5.0
            leader = prometheus.query('rolloutd_leader{daemon="a"}')
            assert float(leader[0]["value"][1]) == 1.0

            workspace.write_metrics(oom_events=1)
            wait_for(lambda: db.state(rollout_id) == "rolled_back", WAIT, "the rollback")
            wait_for(
                lambda: (
                    {"rollback_started", "rolled_back"} <= {_topic(b) for b in slack.delivered()}
                ),
                WAIT,
                "Slack to receive both rollback alerts",
            )
            state = wait_for(
                lambda: prometheus.query(
                    f'rolloutd_rollout_state{{rollout="{rid}",state="rolled_back"}} == 1'
                ),
                30,
                "Prometheus to see the rollback",
            )
            assert state[0]["metric"]["service"] == "atlas"
            wait_for(
                lambda: prometheus.query("rolloutd_outbox_sent_total >= 2"),
                30,
                "Prometheus to count both sent alerts",
            )
            assert prometheus.query("rolloutd_outbox_pending")[0]["value"][1] == "0"
            ticks = prometheus.query('rolloutd_ticks_total{outcome="ok"}')
            assert float(ticks[0]["value"][1]) > 0
        finally:
            prometheus.close()
        db.close()
    log = daemon.log_path.read_text()
    assert SECRET not in log and "/services/" not in log
    assert daemon.logged("alert sent")


def _topic(body: dict[str, Any]) -> str:
    text = str(body.get("text", ""))
    for topic in ("rollback_started", "rolled_back"):
        if topic.replace("_", " ") in text:
            return topic
    return text


def test_metrics_are_served_beside_healthz(daemons: Daemons) -> None:
    """GET /metrics answers the Prometheus text format with the leader gauge."""
    daemon = daemons.spawn("a")
    daemon.wait_role("leader", WAIT)
    deadline = time.monotonic() + WAIT
    body = ""
    while time.monotonic() < deadline and 'rolloutd_leader{daemon="a"} 1.0' not in body:
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/metrics", timeout=2) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            body = r.read().decode()
    assert 'rolloutd_leader{daemon="a"} 1.0' in body
    assert "rolloutd_store_up 1.0" in body
    assert "rolloutd_outbox_oldest_pending_age_seconds 0.0" in body
