"""The list page under a filter: what it costs the database as the rollouts grow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rolloutd.web.pages import index_page
from tests.reconcile.test_reconcile import Harness
from tests.store.seed import copy_rollout, statements

if TYPE_CHECKING:
    from conftest import StoreHandle


def _page(h: Harness, **filters: str) -> tuple[int, str]:
    with h.store.sessions() as session, statements(h.store.engine) as ran:
        page = index_page(session, filters, now=h.clock())
    return len(ran), page


def test_a_state_filter_reads_gates_only_for_the_rollouts_it_shows(store: StoreHandle) -> None:
    """Filtering by a state no rollout is in reads as much with twelve rollouts as with one
    (it read every rollout's gates to learn its state: 1,002 statements and 1.3 s at 1,000
    rollouts); filtering by the state they are in lists them all, with their verdicts."""
    h = Harness(store)
    assert h.tick() == "running"
    assert h.tick(seconds=30) == "running"
    alone, _ = _page(h, state="completed")
    copies = copy_rollout(store.engine, h.rollout_id, 11, with_evaluations=True)
    many, page = _page(h, state="completed")
    assert many == alone
    assert "/rollouts/" not in page
    _, running = _page(h, state="running")
    for rollout_id in [h.rollout_id, *copies]:
        assert f'href="/rollouts/{rollout_id}"' in running
    assert running.count("timeouts") >= 12
