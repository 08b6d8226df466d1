"""The web view in a real browser: Debian's headless Chromium, driven by chromedriver.

The demo's rolled-back rollout (queue timeouts at 25%) is served from its own database by the
web view on the daemon's health server; the pages load without a console error, the decision
panel is the first thing on the page and names the deciding gate, that gate's card comes
first and draws every stored evaluation, and the open page shows an evaluation committed after
it loaded within 5 s, without a reload. A rollout rolled back by a compare trigger shows canary
beside stable. Screenshots of both pages are written for the record: to
``$ROLLOUTD_SCREENSHOTS`` when set (``ROLLOUTD_SCREENSHOTS=docs`` regenerates the README's),
else to the test's temporary directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import func, insert, select

from rolloutd.daemon.health import HealthServer
from rolloutd.demo.run import run_demo
from rolloutd.demo.scenarios import SCENARIOS
from rolloutd.store.db import make_engine, session_factory, transaction
from rolloutd.store.models import Event, GateEvaluation
from rolloutd.web.server import WebView
from tests.required import missing
from tests.routers.services import find_binary
from tests.web.test_decision import rolled_back_on_compare

if TYPE_CHECKING:
    from conftest import StoreHandle

pytestmark = pytest.mark.slow
BREACHING = "queue_timeouts_breach"
SHOT_SIZE = (1200, 1500)
"""The window a README screenshot is taken in: the panel, the weight and the deciding chart."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """The demo's database after its queue-timeouts scenario, and the rolled-back rollout's
    id."""
    workdir = tmp_path_factory.mktemp("demo")
    result = run_demo(SCENARIOS["timeouts"], speed=14400, workdir=workdir)
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


def _rollback_value(sessions: Any, rollout_id: int) -> float:
    with transaction(sessions) as session:
        data = session.scalars(
            select(Event.data).where(
                Event.rollout_id == rollout_id, Event.kind == "rollback_started"
            )
        ).one()
    return float(data["value"])


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
    panel = browser.find_element("css selector", "#decision")
    assert panel.is_displayed() and panel.location["y"] < 300
    assert panel.find_element("css selector", ".decision-gate").text == BREACHING
    value = _rollback_value(sessions, rollout_id)  # the trigger's threshold is <= 0.05
    over = f"{value - 0.05:.4g} over ({value / 0.05:.2f}x the limit)"
    assert panel.find_element("css selector", ".decision-over").text == over
    cards = browser.find_elements("css selector", "section.gate")
    assert cards[0].get_attribute("data-gate") == BREACHING
    badges = {b.text for b in browser.find_elements("css selector", "section.gate h3 .verdict")}
    assert "breach" in badges and badges <= {"pass", "fail", "breach", "inconclusive", "pending"}
    labels = browser.find_elements("css selector", f'[data-gate="{BREACHING}"] .step-label')
    assert [label.text for label in labels] == ["1 shadow", "2 canary 5%", "3 canary 25%"]
    assert "no evaluation yet" not in browser.page_source
    assert _errors(browser) == []
    _screenshot(browser, tmp_path, "rolled-back-rollout.png")


def test_a_compare_gate_draws_canary_beside_stable(
    store: StoreHandle, browser: Any, tmp_path: Path
) -> None:
    """A rollout rolled back by its compare trigger: the panel says canary vs stable, and the
    deciding chart draws both series as visible lines."""
    h = rolled_back_on_compare(store)
    view = WebView(store.sessions, host="127.0.0.1", token=None, clock=h.clock)
    server = HealthServer("127.0.0.1", 0, lambda: (True, {}), web=view.handle)
    server.start()
    _errors(browser)  # reading the log empties it: only this page's entries count
    try:
        browser.get(f"http://127.0.0.1:{server.port}/rollouts/{h.rollout_id}")
        panel = browser.find_element("css selector", "#decision")
        assert "canary vs stable" in panel.text
        card = browser.find_elements("css selector", "section.gate")[0]
        assert card.get_attribute("data-gate") == "esc"
        for series in ("canary", "stable"):
            line = card.find_element("css selector", f'polyline[data-series="{series}"]')
            assert line.is_displayed() and line.size["width"] > 100, series
            assert len(line.get_attribute("points").split()) > 1
        assert _errors(browser) == []
        _screenshot(browser, tmp_path, "canary-beside-stable.png")
    finally:
        browser.get("about:blank")  # stop the page asking a server that is about to go
        server.stop()


def _screenshot(browser: Any, tmp_path: Path, name: str) -> None:
    """The page's top (panel, weight, deciding chart) as a PNG, for the README when asked."""
    shots = Path(os.environ.get("ROLLOUTD_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    size = browser.get_window_size()
    browser.set_window_size(*SHOT_SIZE)
    try:
        assert browser.save_screenshot(str(shots / name))
    finally:
        browser.set_window_size(size["width"], size["height"])


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
