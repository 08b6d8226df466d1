"""The leader's heap is frozen out of the collector's full passes, and refrozen in time."""

from __future__ import annotations

import gc
import itertools
import weakref
from collections.abc import Iterator

import pytest

from rolloutd.daemon.heap import AT_MOST, FIRST_AFTER, Heap


class _Node:
    """A garbage cycle, once its last outside reference is dropped."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's heap as it was: nothing frozen."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_refreezes_on_a_doubling_interval_up_to_the_cap(unfrozen: None) -> None:
    now = [0.0]
    heap = Heap(lambda: now[0])
    done = []
    for second in range(0, 5_000):
        now[0] = float(second)
        if heap.tend():
            done.append(second)
    gaps = [b - a for a, b in itertools.pairwise(done)]
    assert done[0] == FIRST_AFTER
    assert gaps[:4] == [2 * FIRST_AFTER, 4 * FIRST_AFTER, 8 * FIRST_AFTER, 16 * FIRST_AFTER]
    assert max(gaps) == AT_MOST and gaps[-1] == AT_MOST


def test_what_survived_is_frozen_and_a_frozen_cycle_goes_at_the_next_refreeze(
    unfrozen: None,
) -> None:
    """Automatic and explicit collections leave frozen objects alone; a cycle that became
    garbage after it was frozen is collected by the next refreeze, which unfreezes first."""
    now = [0.0]
    heap = Heap(lambda: now[0])
    cycle = _Node()
    gone = weakref.ref(cycle)
    now[0] = FIRST_AFTER
    assert heap.tend()
    assert gc.get_freeze_count() > 0
    del cycle
    gc.collect()
    assert gone() is not None  # frozen: the collector does not walk it
    now[0] = 10 * FIRST_AFTER
    assert heap.tend()
    assert gone() is None
