"""The leader's heap is frozen out of the collector's full passes, and refrozen in time."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
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


_SCATTERED = """
from rolloutd.daemon.heap import trim

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

blocks = [bytearray(4000) for _ in range(50_000)]
kept = blocks[::50]  # one in fifty stays: the freed rest lies between what is kept
del blocks
before = rss()
print(trim(), before, rss())
"""


def test_a_refreeze_gives_the_free_c_heap_back_to_the_system(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a burst of 200 MB of allocations of which one in fifty is kept, the process
    holds on to the freed memory between the kept blocks until it is trimmed (measured in a
    process of its own, as the unit runs it, with two malloc arenas); each refreeze trims."""
    found = subprocess.run(
        [sys.executable, "-c", _SCATTERED],
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},
        capture_output=True,
        text=True,
        check=True,
    )
    trimmed, before, after = found.stdout.split()
    assert trimmed == "True" and float(before) > 150
    assert float(after) < float(before) / 3

    import rolloutd.daemon.heap as module

    calls: list[int] = []
    monkeypatch.setattr(module, "trim", lambda: calls.append(gc.get_freeze_count()) or True)
    now = [0.0]
    heap = Heap(lambda: now[0])
    now[0] = FIRST_AFTER
    assert heap.tend()
    assert len(calls) == 1 and calls[0] > 0  # after the collection and the freeze
