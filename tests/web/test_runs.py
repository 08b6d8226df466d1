"""A suite run's page: reached from its rollout's page, with each field's outcomes and each
case's fields, for a run scored against a real (simulated) engine over HTTP."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from rolloutd.evaluation import records
from rolloutd.evaluation.runner import run_suite
from rolloutd.evaluation.suite import load_suite
from rolloutd.web.server import WebView
from tests.evaluation.conftest import SIM, first_cases, start
from tests.reconcile.test_reconcile import Harness

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import StoreHandle


def test_a_suite_run_has_a_page_linked_from_its_rollout(store: StoreHandle, tmp_path: Path) -> None:
    """An int4-like canary's run of 40 cases, stored against a rollout's gate: the rollout
    page links ``/runs/ID``, whose field table sums to the stored field results and whose
    cases show what was expected and what came back; an unknown run is a 404."""
    suite = load_suite(first_cases(tmp_path / "suite.jsonl", 40))
    replica = start("int4-like", seed=3)
    try:
        run = run_suite(suite, replica.url, options=SIM)
    finally:
        replica.stop()
    h = Harness(store)
    h.tick()
    with store.sessions.begin() as session:
        run_id = records.store_run(
            session, run, rollout_id=h.rollout_id, step_index=0, gate="tool_args"
        )
    view = WebView(store.sessions, host="127.0.0.1", token=None, clock=h.clock)
    rollout = view.handle(f"/rollouts/{h.rollout_id}", "", {}).body.decode()
    assert f'<a href="/runs/{run_id}">run {run_id}</a>' in rollout
    answer = view.handle(f"/runs/{run_id}", "", {})
    assert answer.status == 200
    page = answer.body.decode()
    assert f'href="/rollouts/{h.rollout_id}"' in page
    assert f"{len(run.cases)} cases" in page
    fields = re.search(r'<table id="fields">.*?</table>', page, re.S)
    assert fields is not None
    counts = [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', fields.group(0))]
    stored = Counter(f.outcome for case in run.cases for f in case.fields)
    assert sum(counts) == sum(stored.values()) > 0
    # Seed 3 of the int4-like profile gets 4 values wrong in these 40 cases.
    assert stored["wrong_value"] > 0
    assert page.count("wrong_value: expected <code>") == stored["wrong_value"]
    assert len(re.findall(r'<tr class="case o-', page)) == len(run.cases)
    missing = view.handle(f"/runs/{run_id + 1000}", "", {})
    assert missing.status == 404 and b"no suite run" in missing.body
