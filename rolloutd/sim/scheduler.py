"""The engine scheduler model: resident-sequence slots, a FIFO queue, and service times.

An engine keeps at most ``resident_sequences`` sequences in its KV cache; more requests
wait in arrival order, and a request still waiting at the queue timeout is rejected. This
is a real queue over real threads (the HTTP server's), so concurrency in the tests and
the demo produces queueing the way it does on a GPU. Waits are measured in wall time and
converted to simulated time by the replica's ``time_scale``.

Service time is simulated, never measured: prefill grows with the prompt, decode with the
output, and both with the number of sequences sharing the GPU.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

Admission = Literal["granted", "timeout", "closed"]


class _Waiter:
    __slots__ = ("closed", "event", "granted")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False
        self.closed = False


class SlotPool:
    """Resident-sequence slots handed out first come, first served."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._busy = 0
        self._waiters: deque[_Waiter] = deque()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        """Sequences holding a slot."""
        return self._busy

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self._waiters)

    @property
    def capacity(self) -> int:
        """How many sequences may be resident at once."""
        return self._capacity

    def acquire(self, timeout: float) -> tuple[Admission, int, bool]:
        """Wait up to ``timeout`` wall seconds for a slot; also returns the running count
        right after admission (the batch this request joins) and whether it had to queue.

        A request admitted at once has queued for no time at all: the wall time around an
        uncontended lock is the host's scheduling, which at the simulation's time scale would
        read as seconds of queueing on a busy machine.
        """
        with self._lock:
            if self._closed:
                return "closed", self._busy, False
            if self._busy < self._capacity and not self._waiters:
                self._busy += 1
                return "granted", self._busy, False
            waiter = _Waiter()
            self._waiters.append(waiter)
        waiter.event.wait(timeout)
        with self._lock:
            if waiter.granted:
                return "granted", self._busy, True
            if waiter.closed:
                return "closed", self._busy, True
            self._waiters.remove(waiter)
            return "timeout", self._busy, True

    def release(self) -> None:
        """Give a slot back; the longest waiter gets it."""
        with self._lock:
            self._busy -= 1
            self._grant()

    def close(self) -> None:
        """The engine died: every waiter fails now, later requests fail at once."""
        with self._lock:
            self._closed = True
            while self._waiters:
                waiter = self._waiters.popleft()
                waiter.closed = True
                waiter.event.set()

    def _grant(self) -> None:
        while self._waiters and self._busy < self._capacity:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self._busy += 1
            waiter.event.set()


@dataclass(frozen=True)
class ServiceModel:
    """Simulated compute times of a 70B model on 4x L40S with in-flight batching.

    Defaults: a 6,000-token prefill takes ~1.2 s alone; decode runs at ~18 ms per token
    alone and ~32 ms per token with 36 sequences resident.
    """

    prefill_tokens_per_s: float = 5000.0
    prefill_contention: float = 0.01
    decode_s_per_token: float = 0.018
    decode_s_per_token_per_seq: float = 0.0004

    def prefill_seconds(self, prompt_tokens: int, running: int) -> float:
        """Time to first token once admitted, with ``running`` sequences on the GPU."""
        alone = prompt_tokens / self.prefill_tokens_per_s
        return alone * (1.0 + self.prefill_contention * max(running - 1, 0))

    def decode_seconds(self, output_tokens: int, running: int) -> float:
        """Time to generate ``output_tokens`` in a batch of ``running`` sequences."""
        per_token = self.decode_s_per_token + self.decode_s_per_token_per_seq * running
        return output_tokens * per_token
