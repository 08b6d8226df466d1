"""The rollout page says why it rolled back before anything else, in one vocabulary.

A compare trigger (escalations on the canary vs stable) rolls a rollout back through the real
reconciler on the store; its page and report are read as an operator would: the decision
panel on top, the deciding gate's card first with canary beside stable, a step gate that only
held drawn as a hold, the steps named on the time axis, and the report's stylesheet intact.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from rolloutd.deploy.catalog import pin
from rolloutd.store import queries
from rolloutd.store.artefact_models import Drill
from rolloutd.store.writes import add_row
from rolloutd.web.pages import index_page, rollout_html, rollout_json
from tests.deploy.helpers import pinned
from tests.plans import memory_plan
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from conftest import StoreHandle

GATES = {
    "esc": {"kind": "compare", "signal": "escalations", "alpha": 0.05},
    "oom": {"kind": "events", "signal": "oom_events"},
    "later": {"kind": "threshold", "signal": "queue_timeout_rate", "max": 0.5},
}


def rolled_back_on_compare(store: StoreHandle) -> Harness:
    """Escalations 6% vs 5% over 3,000 canary sessions: the final look at the end of the
    25% step rolls back on the compare trigger ``esc``; ``later`` (the 100% step's gate) is
    never reached."""
    plan = memory_plan(gate="", triggers=("esc", "oom"), gates=GATES)
    for step in plan["steps"][:2]:
        step["gates"] = ["esc"]
    plan["steps"][-1]["gates"] = ["later"]
    h = Harness(store, plan=plan)
    h.metrics.set("escalations", "canary", 180, samples=3000)
    h.metrics.set("escalations", "stable", 850, samples=17000)
    h.tick()
    h.tick(seconds=5)
    h.tick(hours=1)
    h.tick(hours=47, seconds=1)
    h.tick(seconds=5)
    h.tick(hours=1)
    assert h.tick(hours=47, seconds=1) == "rolling_back", h.events()
    h.tick(seconds=5)
    return h


def _page(h: Harness, *, report: bool) -> str:
    with h.store.sessions() as session:
        return rollout_html(session, h.rollout_id, now=h.clock(), report=report)


def _gate_section(page: str, gate: str) -> str:
    found = re.search(rf'<section class="card gate[^"]*" id="gate-{gate}".*?</section>', page, re.S)
    assert found is not None, f"no card for {gate}"
    return found.group(0)


def test_the_decision_panel_comes_first_and_names_the_gate_value_and_evidence(
    store: StoreHandle,
) -> None:
    """The panel precedes the charts and names the deciding gate, its value against the
    threshold, the samples, canary vs stable, the statistic, when, and links to its chart."""
    h = rolled_back_on_compare(store)
    page = _page(h, report=False)
    panel = re.search(r'<section class="card decision" id="decision">.*?</section>', page, re.S)
    assert panel is not None
    assert page.index('id="decision"') < page.index('id="weight-chart"')
    text = panel.group(0)
    assert '<strong class="decision-gate">esc</strong>' in text
    assert 'href="#gate-esc"' in text
    assert "not above stable" in text  # the threshold the value was judged against
    assert re.search(r"20,?000 samples|20000 samples", text), text
    assert re.search(r"canary vs stable</th><td>0\.06 vs 0\.05", text), text
    assert "statistic" in text and "rollback started" in text
    with h.store.sessions() as session:
        document = rollout_json(session, h.rollout_id, now=h.clock())
        listed = index_page(session, {}, now=h.clock())
    # The list says what the page says: the trigger that failed is a breach there too.
    assert 'title="esc: breach"' in listed
    assert document["decision"]["gate"] == "esc"
    assert document["decision"]["samples"] == 20000


def test_the_deciding_card_is_first_and_draws_canary_beside_stable(store: StoreHandle) -> None:
    """The deciding gate's card is the first, ringed and marked; its chart has both series,
    and its verdict reads *breach* as the legend and the events do."""
    h = rolled_back_on_compare(store)
    page = _page(h, report=False)
    first = re.search(r'<section class="card gate[^"]*" id="gate-([^"]+)"', page)
    assert first is not None and first.group(1) == "esc"
    card = _gate_section(page, "esc")
    assert 'class="card gate decided"' in card
    assert 'data-series="canary"' in card and 'data-series="stable"' in card
    assert "canary beside stable" in card
    assert 'class="verdict v-breach">breach<' in card
    assert 'data-verdict="fail"' not in card  # a trigger's fail is what rolled back: a breach
    assert ">fail<" not in page.split('id="timeline"')[0].split("</h3>", 1)[0]


def test_steps_are_named_on_the_time_axis_and_it_has_more_than_two_labels(
    store: StoreHandle,
) -> None:
    """Every entered step is labelled on the chart, and the time axis has six labels."""
    h = rolled_back_on_compare(store)
    card = _gate_section(_page(h, report=False), "esc")
    labels = re.findall(r'<text class="step-label"[^>]*data-step="(\d+)">([^<]+)</text>', card)
    assert [n for n, _ in labels] == ["1", "2"], labels
    assert all(name.strip() for _, name in labels)
    assert len(re.findall(r'<text class="tick x"', card)) == 6


def _latency_buckets(median: float, count: int) -> list[list[float]]:
    """A latency histogram: 50% under the median, 96% under twice it."""
    shares = ((0.5, 0.1), (1, 0.5), (2, 0.96), (4, 1.0))
    return [[median * at, count * share] for at, share in shares] + [[float("inf"), count]]


def test_a_latency_comparison_draws_stable_its_interval_and_its_target(
    store: StoreHandle,
) -> None:
    """A latency trigger against stable (p95 under 12 s and 1.5x stable) rolls back on a
    canary four times slower: its chart draws stable's p95 beside the canary's, the canary's
    p95 interval as a band, and the 12 s target as the threshold line."""
    gates = {
        "lat": {
            "kind": "latency",
            "signal": "e2e_latency",
            "target_seconds": 12.0,
            "max_ratio": 1.5,
        },
        "oom": {"kind": "events", "signal": "oom_events"},
    }
    plan = memory_plan(gate="", triggers=("lat", "oom"), gates=gates)
    h = Harness(store, plan=plan)
    h.metrics.set("e2e_latency", "stable", 4.0, 30000, {"buckets": _latency_buckets(2.0, 30000)})
    h.metrics.set("e2e_latency", "canary", 4.0, 3000, {"buckets": _latency_buckets(2.0, 3000)})
    h.tick()
    h.tick(seconds=5)
    for _ in range(3):
        assert h.tick(minutes=1) == "running", h.events()
    h.metrics.set("e2e_latency", "canary", 16.0, 3000, {"buckets": _latency_buckets(8.0, 3000)})
    state = h.tick(minutes=1)
    assert state in ("rolling_back", "rolled_back"), h.events()
    card = _gate_section(_page(h, report=False), "lat")
    stable = re.search(r'<polyline class="stable" data-series="stable" points="([^"]+)"', card)
    assert stable is not None and len(stable.group(1).split()) >= 4
    assert 'data-series="canary"' in card
    assert '<polygon class="bound"' in card
    assert "<title>threshold p95 &lt; 12s" in card
    assert "band: the interval the test used" in card


def test_gates_never_reached_are_folded_away_once_the_rollout_ended(store: StoreHandle) -> None:
    """The 100% step's gate, never evaluated, is one folded line, not a card."""
    h = rolled_back_on_compare(store)
    page = _page(h, report=False)
    assert 'id="gate-later"' not in page
    assert "no evaluation yet" not in page
    folded = re.search(r'<details class="not-reached">(.*?)</details>', page, re.S)
    assert folded is not None and "later" in folded.group(1)


def test_a_step_gate_that_only_held_is_not_drawn_as_the_breach(store: StoreHandle) -> None:
    """A step gate's fail holds the step (violet *fail*), the trigger's fail rolled back
    (red *breach*): the two are told apart on the page and in the legend."""
    plan = memory_plan(
        gate="",
        triggers=("qt_breach",),
        gates={
            "qt": {"kind": "threshold", "signal": "queue_timeout_rate", "max": 0.01},
            "qt_breach": {"kind": "threshold", "signal": "queue_timeout_rate", "max": 0.05},
        },
    )
    plan["steps"][0]["gates"] = ["qt"]
    h = Harness(store, plan=plan)
    h.metrics.set("queue_timeout_rate", "canary", 0.03, samples=500)
    h.tick()
    h.tick(seconds=5)
    h.tick(hours=1)  # qt fails (holds), qt_breach passes
    h.metrics.set("queue_timeout_rate", "canary", 0.08, samples=500)
    assert h.tick(minutes=1) == "rolling_back", h.events()
    page = _page(h, report=False)
    assert 'class="verdict v-breach">breach<' in _gate_section(page, "qt_breach")
    held = _gate_section(page, "qt")
    assert 'class="verdict v-fail">fail<' in held
    assert 'data-verdict="breach"' not in held and "decided the rollback" not in held
    assert '<span class="verdict v-fail">fail (holds the step)</span>' in page


def test_the_report_keeps_its_stylesheet_unescaped(store: StoreHandle) -> None:
    """The report's inline CSS reaches the browser as written: quotes, not ``&#34;``."""
    h = rolled_back_on_compare(store)
    page = _page(h, report=True)
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    assert style is not None
    assert '"Segoe UI"' in style.group(1)
    assert "&#34;" not in style.group(1) and "&gt;" not in style.group(1)


def test_the_pairs_staging_drill_is_shown_whatever_plan_ran_it(
    store: StoreHandle, tmp_path: Path
) -> None:
    """Admission looks for a passed staging drill of the artefact pair, not of the plan's
    name (the walkthrough drills ``atlas-70b-staging`` and starts another plan); the page
    finds the drill the same way and says it admitted the start."""
    h = rolled_back_on_compare(store)
    sets = {
        role: pinned(tmp_path, name, {"max_seq_len": size})
        for role, name, size in (("stable", "fp8-msl32768", 32768), ("canary", "fp8-msl8192", 8192))
    }
    with h.store.sessions.begin() as session:
        for found in sets.values():
            pin(session, found, now=h.clock())
        created = queries.get_rollout(session, h.rollout_id).created_at
        add_row(
            session,
            Drill(
                plan_name="another-name-staging",
                service="svc",
                environment="staging",
                stable_set="fp8-msl32768",
                canary_set="fp8-msl8192",
                stable_digest=sets["stable"].digest,
                canary_digest=sets["canary"].digest,
                result="passed",
                actor="alice",
                started_at=created - timedelta(hours=1),
                finished_at=created - timedelta(minutes=50),
                reason=None,
                detail={},
            ),
        )
    drills = re.search(r'<table id="drills">.*?</table>', _page(h, report=False), re.S)
    assert drills is not None
    assert "another-name-staging" in drills.group(0)
    assert "admitted this rollout" in drills.group(0)
