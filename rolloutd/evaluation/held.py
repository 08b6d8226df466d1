"""A run held as a job: renewed while it goes on, stopped on demand, and resumable.

In the daemon a suite run is a job an instance holds (see ``rolloutd.reconcile.runs``). A
:class:`RunControl` says whether each request may still start, is renewed while the run goes
on, stops the run (:func:`held` cancels it within :data:`POLL_SECONDS`, abandoning its
requests) and fences every write of the run.

Each case's result is kept in the database as it completes (:class:`Keeper`): a worker takes
its next case only once its last result is stored, and the results that complete while a
write is in flight go together in the next one (group commit). So a run taken over after its
holder died asks again at most one case per worker: the ones in flight at the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from rolloutd.evaluation import records
from rolloutd.evaluation.compare import CaseResult
from rolloutd.evaluation.exchange import RunAbandoned
from rolloutd.evaluation.references import ReferenceResult
from rolloutd.evaluation.results import RunRole

if TYPE_CHECKING:
    from rolloutd.store.types import Session

T = TypeVar("T")

# How often a held run looks whether it was stopped: the bound on abandoning its requests.
POLL_SECONDS = 0.1


@dataclass(frozen=True)
class JobRef:
    """The job a run belongs to: its id, its name (which seeds a live sample) and when it
    was due (where a live sample's window ends)."""

    id: int
    name: str
    due_at: datetime


class RunControl(Protocol):
    """How the holder of a suite job steers its run."""

    @property
    def job(self) -> JobRef:
        """The job whose runs are stored."""

    @property
    def renew_every(self) -> float:
        """Seconds between calls to :meth:`renew`."""

    def permit(self, timeout_s: float) -> bool:
        """Whether a request with this timeout may start now."""

    def stopped(self) -> bool:
        """Whether the run is to stop at once."""

    def renew(self) -> None:
        """Keep holding the job (a database write); stops the run when the job was lost."""

    def write(self) -> AbstractContextManager[Session]:
        """A transaction that commits only while the job and the lease are still ours.

        :raises NotLeading: (from ``rolloutd.reconcile``) when they are not.
        """


async def held(work: Awaitable[T], control: RunControl) -> T:
    """Run ``work`` while renewing ``control``; cancel it (abandoning the requests in flight)
    within :data:`POLL_SECONDS` of the control stopping.

    :raises RunAbandoned: the control stopped the run.
    """
    task = asyncio.ensure_future(work)
    renew_at = time.monotonic() + control.renew_every
    while not task.done():
        await asyncio.wait({task}, timeout=POLL_SECONDS)
        if not task.done() and time.monotonic() >= renew_at:
            await asyncio.to_thread(control.renew)
            renew_at = time.monotonic() + control.renew_every
        if not task.done() and control.stopped():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise RunAbandoned("the run was stopped")
    return task.result()


Kept = CaseResult | ReferenceResult
"""A case's result in either kind of suite: a tool call's or a reference answer's."""
_Waiting = tuple[RunRole, int, Kept, "asyncio.Future[None]"]
_ROLES: tuple[RunRole, ...] = ("canary", "baseline")


class Keeper:
    """Keeps each case's result of one suite's runs in the job as it completes.

    Use inside the run's event loop: ``async with keeper.writing(): ...`` around the runs,
    each run with ``keep=keeper.keep_for(role)``. A write that fails (the job or the lease
    was lost) fails the cases waiting on it, and so the run.
    """

    def __init__(
        self, control: RunControl, suite_sha256: str, clock: Callable[[], datetime]
    ) -> None:
        self.control = control
        self.suite_sha256 = suite_sha256
        self.clock = clock
        self._waiting: list[_Waiting] = []
        self._wake = asyncio.Event()

    def keep_for(self, role: RunRole) -> Callable[[int, Kept], Awaitable[None]]:
        """The runner's ``keep`` for the run of ``role`` (either kind of suite)."""

        async def keep(position: int, result: Kept) -> None:
            stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((role, position, result, stored))
            self._wake.set()
            await stored

        return keep

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Write what is waiting while the block runs."""
        writer = asyncio.create_task(self._write_forever())
        try:
            yield
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _write_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._waiting = self._waiting, []
            if not batch:
                continue
            try:
                await asyncio.to_thread(self._write, batch)
            except Exception as exc:  # handed to the workers that wait on it
                for *_, stored in batch:
                    if not stored.done():
                        stored.set_exception(exc)
            else:
                for *_, stored in batch:
                    if not stored.done():
                        stored.set_result(None)

    def _write(self, batch: list[_Waiting]) -> None:
        now = self.clock()
        with self.control.write() as session:
            for role in _ROLES:
                cases = [(position, result) for r, position, result, _ in batch if r == role]
                if cases:
                    records.keep_cases(
                        session,
                        job_id=self.control.job.id,
                        suite_sha256=self.suite_sha256,
                        role=role,
                        cases=cases,
                        now=now,
                    )
