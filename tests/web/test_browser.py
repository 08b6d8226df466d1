"""The web view in a real browser: Debian's headless Chromium, driven by chromedriver.

The demo's rolled-back rollout (OOM at 25%) is served from its own database by the web view
on the daemon's health server; the pages load without a console error, the breaching gate's
chart draws every stored evaluation, and the open page shows an evaluation committed after
it loaded within 5 s, without a reload. A screenshot of the page is written for the record
(to ``$ROLLOUTD_SCREENSHOTS`` when set, else to the test's temporary directory).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from rolloutd.daemon.health import HealthServer
from rolloutd.demo.run import run_demo
from rolloutd.demo.scenarios import SCENARIOS
from rolloutd.store.db import make_engine, session_factory, transaction
from rolloutd.store.models import GateEvaluation
from rolloutd.web.server import WebView
from tests.required import missing
from tests.routers.services import find_binary

pytestmark = pytest.mark.slow
BREACHING = "canary_oom"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """The demo's database after its OOM scenario, and the rolled-back rollout's id."""
    workdir = tmp_path_factory.mktemp("demo")
    result = run_demo(SCENARIOS["oom"], speed=14400, workdir=workdir)
    assert result.state == "rolled_back", result.state
    assert result.database is not None
    return result.database, result.rollout_id


@pytest.fixture(scope="module")
def site(demo: tuple[str, int]) -> Iterator[tuple[str, Any]]:
    """The web view over the demo's database on a loopback port, and its sessions."""
    sessions = session_factory(make_engine(demo[0]))
    view = WebView(sessions, host="127.0.0.1", token=None, clock=lambda: datetime.now(UTC))
    server = HealthServer("127.0.0.1", 0, lambda: (True, {}), web=view.handle)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", sessions
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium with its console log kept."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed", "pip install -e '.[dev]' (bash .ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = find_binary("chromium")
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,2400",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(find_binary("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _errors(browser: Any) -> list[dict[str, Any]]:
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def _drawn(browser: Any, gate: str) -> int:
    return len(browser.find_elements("css selector", f'[data-gate="{gate}"] circle.point'))


def _stored(sessions: Any, rollout_id: int, gate: str) -> int:
    with transaction(sessions) as session:
        return int(
            session.scalar(
                select(func.count()).where(
                    GateEvaluation.rollout_id == rollout_id, GateEvaluation.gate == gate
                )
            )
        )


def test_a_rolled_back_rollout_is_shown_in_full_without_console_errors(
    site: tuple[str, Any], demo: tuple[str, int], browser: Any, tmp_path: Path
) -> None:
    url, sessions = site
    rollout_id = demo[1]
    browser.get(url + "/")
    row = browser.find_element("css selector", "#rollouts tbody tr")
    assert "rolled_back" in row.text
    browser.get(f"{url}/rollouts/{rollout_id}")
    assert "rolled_back" in browser.find_element("css selector", "h1").text
    stored = _stored(sessions, rollout_id, BREACHING)
    assert stored > 10
    assert _drawn(browser, BREACHING) == stored
    ringed = browser.find_elements("css selector", f'[data-gate="{BREACHING}"] circle.decided')
    assert len(ringed) == 1 and ringed[0].get_attribute("data-verdict") == "breach"
    kinds = [e.text for e in browser.find_elements("css selector", "#timeline tr td:nth-child(2)")]
    assert kinds[-1] == "rolled_back" and "rollback_started" in kinds
    assert _errors(browser) == []
    shots = Path(os.environ.get("ROLLOUTD_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shots / "rolled-back-rollout.png"))


def test_the_open_page_shows_a_new_evaluation_within_5_s(
    site: tuple[str, Any], demo: tuple[str, int], browser: Any
) -> None:
    url, sessions = site
    rollout_id = demo[1]
    browser.get(f"{url}/rollouts/{rollout_id}")
    before = _drawn(browser, BREACHING)
    with transaction(sessions) as session:
        newest = session.scalars(
            select(GateEvaluation)
            .where(GateEvaluation.rollout_id == rollout_id, GateEvaluation.gate == BREACHING)
            .order_by(GateEvaluation.id.desc())
        ).first()
        assert newest is not None
        session.execute(
            insert(GateEvaluation).values(
                rollout_id=rollout_id,
                step_index=newest.step_index,
                gate=BREACHING,
                role=newest.role,
                verdict="inconclusive",
                value=None,
                threshold=newest.threshold,
                reason="no data for oom_events on canary",
                evidence={},
                evaluated_at=newest.evaluated_at + timedelta(seconds=1),
            )
        )
    committed = time.monotonic()
    while _drawn(browser, BREACHING) != before + 1:
        assert time.monotonic() - committed < 5.0, "the page did not show the new evaluation"
        time.sleep(0.1)
    assert _errors(browser) == []
