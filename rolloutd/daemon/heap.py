"""The leader's long-lived objects, kept out of the cyclic garbage collector's full passes.

A leader of thousands of rollouts keeps their facts between ticks: at 10,000 rollouts some
630,000 objects, which every full collection walks (0.43 s, measured), and the ticks'
allocations set one off about once every 20,000 rollout-ticks (measured in-process: 20 s at
10,000 rollouts). It holds the interpreter lock throughout: every thread waits for it.
:class:`Heap` collects in full itself now and then, and moves what survived into the
permanent generation (:func:`gc.freeze`), which automatic collections leave alone: they walk
only what is newer. Freed objects are still freed (their reference counts drop); only
garbage cycles among the frozen wait for the next refreeze, which first puts them back
(:func:`gc.unfreeze`). The interval doubles from :data:`FIRST_AFTER` to :data:`AT_MOST`: a
new leader's facts are frozen soon after they are read, and a steady leader pays one full
pass every ten minutes.

After each pass the C heap's free pages go back to the system (glibc's ``malloc_trim``): a
new leader reads thousands of rollouts at once, and the memory that burst freed stayed in the
process, scattered among what it keeps.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable

FIRST_AFTER = 30.0
AT_MOST = 600.0


class Heap:
    """Refreezes the heap on a doubling interval; ``tend`` is called from the main loop."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self._every = FIRST_AFTER
        self._next = monotonic() + FIRST_AFTER

    def tend(self) -> bool:
        """Refreeze when it is time; whether it did."""
        now = self.monotonic()
        if now < self._next:
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        trim()
        self._every = min(AT_MOST, self._every * 2)
        self._next = now + self._every
        return True


def trim() -> bool:
    """Return the C heap's free memory to the system; whether the C library can (glibc)."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim  # the C library the process runs on
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim(0)
    return True
