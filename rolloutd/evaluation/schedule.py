"""Running a due suite gate for a rollout step, storing the runs, and judging stored runs.

The daemon calls :func:`suite_due` (in ``rolloutd.evaluation.gate``) on its tick; when a
suite gate is due it calls :func:`run_suite_for_gate` *off the tick thread* (a 300-case run
against a 70B model takes minutes), and records the returned evaluation like any other.
On the ticks in between, :func:`judge_stored` re-judges the newest stored runs, so the
gate always has a current verdict without asking the engines again.

Endpoints: the canary is the canary pool's first replica and the baseline the stable pool's
first replica, unless the gate names ``endpoint`` / ``baseline_endpoint``. The
``at_least_baseline`` rule compares with the *shadow baseline*: the newest baseline run of
the same suite in this rollout, whichever gate stored it; the baseline is run again only
when there is none. Requests use temperature 0 and a fixed seed, so an unchanged build
answers the same way each day.

In the daemon a run is a job it holds (see ``rolloutd.reconcile.suites``): a
:class:`RunControl` says whether each request may still start, is renewed while the run goes
on, stops the run (its requests are abandoned within :data:`POLL_SECONDS`) and fences the
writes of its results.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from rolloutd.analysis.base import Evaluation, Role
from rolloutd.clock import utc_now
from rolloutd.core.actions import Verdict
from rolloutd.core.durations import format_duration
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.errors import BadInput
from rolloutd.evaluation import records
from rolloutd.evaluation.gate import combine, judge_suite
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.evaluation.runner import RunAbandoned, RunnerOptions, run_suite_async
from rolloutd.evaluation.suite import Suite, load_suite
from rolloutd.store.db import transaction

T = TypeVar("T")

# How often a held run looks whether it was stopped: the bound on abandoning its requests.
POLL_SECONDS = 0.1


@dataclass(frozen=True)
class _Pair:
    """One suite's baseline and canary runs, and which run of its suite the canary is in the
    rollout (its share of alpha hangs on it)."""

    baseline: RunSummary
    canary: RunSummary
    number: int


class RunControl(Protocol):
    """How the holder of a suite job steers its run."""

    @property
    def job_id(self) -> int | None:
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
        """A transaction that commits only while the job and the lease are still ours."""


LIVE = "live"
"""The label of a gate's ``sampled`` source: its cases are sampled afresh at each run from
the capture directory, which stands as the suite's path in the stored runs."""


def suite_paths(spec: SuiteGate, base_dir: Path | None = None) -> list[tuple[str, Path]]:
    """The gate's suites as (label, path): ``suite``, then ``sampled`` when named, then
    ``live`` (the capture directory of ``sampled``).

    Relative paths are read from ``base_dir`` (default: the working directory).
    """
    root = base_dir or Path.cwd()
    named = [] if spec.suite is None else [("suite", spec.suite)]
    if spec.sampled_suite:
        named.append(("sampled", spec.sampled_suite))
    if spec.sampled is not None:
        named.append((LIVE, spec.sampled.capture))
    return [
        (label, Path(path) if Path(path).is_absolute() else root / path) for label, path in named
    ]


def endpoints(plan: Plan, spec: SuiteGate) -> tuple[str, str]:
    """(baseline, canary) URLs for the gate."""
    baseline = spec.baseline_endpoint or plan.pools.stable.replicas[0].url
    canary = spec.endpoint or plan.pools.canary.replicas[0].url
    return baseline, canary


def run_suite_for_gate(
    sessions: sessionmaker[Session],
    *,
    plan: Plan,
    spec: SuiteGate,
    name: str,
    role: Role,
    rollout_id: int,
    step_index: int,
    now: datetime,
    base_dir: Path | None = None,
    options: RunnerOptions | None = None,
    clock: Callable[[], datetime] = utc_now,
    control: RunControl | None = None,
) -> Evaluation:
    """Run the gate's suite(s) on both endpoints, store the runs, and judge them.

    Blocks for as long as the runs take; never raises for an engine problem (those are
    request errors, and too many make the verdict inconclusive) or for a suite file that
    cannot be read (inconclusive, with the file, line and field in the reason). ``options``
    defaults to the gate's concurrency; pass ``send_expected=True`` for the simulated fleet.
    ``clock`` stamps the runs: pass the rollout's clock, since :func:`~.gate.suite_due` compares
    their finish with the rollout's ``now``. Under a ``control`` the run is held as a job.

    :raises RunAbandoned: when ``control`` stopped the run; what it stored before stays.
    """
    options = options or RunnerOptions(concurrency=spec.concurrency)

    def run_one(label: str, path: Path) -> Evaluation | _Pair:
        try:
            if label == LIVE:
                suite = _live_suite(spec, path, now, seed=_seed(rollout_id, name, now))
            else:
                suite = load_suite(path)
        except BadInput as exc:
            what = "live sample" if label == LIVE else "bad suite"
            return Evaluation(name, role, Verdict.INCONCLUSIVE, now, reason=f"{what}: {exc}")
        # A live sample is replayed to both pools at every run: the reference is what stable
        # answered when it was captured, and stable's replay tells a regression from
        # nondeterminism and from a reference that was wrong.
        baseline, canary = _run_pair(
            sessions, plan, spec, suite, rollout_id, options, clock, control, label != LIVE
        )
        write = transaction(sessions) if control is None else control.write()
        with write as session:
            ids = {}
            for run in (baseline, canary):
                if run.run_id is None:
                    ids[run.role] = records.store_run(
                        session,
                        run,
                        rollout_id=rollout_id,
                        step_index=step_index,
                        gate=name,
                        job_id=None if control is None else control.job_id,
                    )
            baseline = _with_id(baseline, ids.get("baseline"))
            canary = _with_id(canary, ids.get("canary"))
            return _Pair(
                baseline, canary, _run_number(session, canary, rollout_id=rollout_id, gate=name)
            )

    return _judge_each(spec, base_dir, run_one, name=name, role=role, now=now)


def judge_stored(
    session: Session,
    *,
    spec: SuiteGate,
    name: str,
    role: Role,
    rollout_id: int,
    now: datetime,
    base_dir: Path | None = None,
) -> Evaluation:
    """Judge the gate's newest stored runs without running anything.

    *Pending* until the gate has stored a canary run of each of its suites.
    """

    def stored_one(label: str, path: Path) -> Evaluation | _Pair:
        canary = records.latest_run(
            session, rollout_id=rollout_id, role="canary", gate=name, suite_path=str(path)
        )
        baseline = None
        if canary is not None:
            baseline = records.latest_run(
                session,
                rollout_id=rollout_id,
                role="baseline",
                gate=None if spec.rule == "at_least_baseline" else name,
                suite_sha256=canary.suite_sha256,
            )
        if canary is None or baseline is None:
            reason = f"the {label} has not been run for this gate yet"
            return Evaluation(name, role, Verdict.PENDING, now, reason=reason)
        return _Pair(
            baseline, canary, _run_number(session, canary, rollout_id=rollout_id, gate=name)
        )

    return _judge_each(spec, base_dir, stored_one, name=name, role=role, now=now)


def _judge_each(
    spec: SuiteGate,
    base_dir: Path | None,
    pair_for: Callable[[str, Path], Evaluation | _Pair],
    *,
    name: str,
    role: Role,
    now: datetime,
) -> Evaluation:
    """Judge each of the gate's suites and combine the verdicts.

    ``pair_for(label, path)`` gives the suite's runs to judge, or the evaluation to use
    when there are none.
    """
    paths = suite_paths(spec, base_dir)
    evaluations = []
    for label, path in paths:
        found = pair_for(label, path)
        if isinstance(found, _Pair):
            found = judge_suite(
                spec,
                found.baseline,
                found.canary,
                name=name,
                role=role,
                now=now,
                run=found.number,
                looks=len(paths),
            )
        evaluations.append(found)
    return combine(evaluations, [label for label, _ in paths])


def _run_pair(
    sessions: sessionmaker[Session],
    plan: Plan,
    spec: SuiteGate,
    suite: Suite,
    rollout_id: int,
    options: RunnerOptions,
    clock: Callable[[], datetime],
    control: RunControl | None,
    reuse_baseline: bool = True,
) -> tuple[RunSummary, RunSummary]:
    baseline_url, canary_url = endpoints(plan, spec)
    stored: RunSummary | None = None
    if spec.rule == "at_least_baseline" and reuse_baseline:
        with sessions() as session:
            stored = records.latest_run(
                session, rollout_id=rollout_id, role="baseline", suite_sha256=suite.sha256
            )

    permit = None if control is None else control.permit

    async def both() -> Sequence[RunSummary]:
        asks: list[tuple[RunRole, str]] = [("canary", canary_url)]
        if stored is None:
            asks.append(("baseline", baseline_url))
        return await asyncio.gather(
            *(
                run_suite_async(suite, url, role=role, options=options, clock=clock, permit=permit)
                for role, url in asks
            )
        )

    runs = asyncio.run(both() if control is None else _held(both(), control))
    return (stored if stored is not None else runs[1]), runs[0]


async def _held(work: Awaitable[T], control: RunControl) -> T:
    """Run ``work`` while renewing ``control``; cancel it (abandoning the requests in flight)
    within :data:`POLL_SECONDS` of the control stopping."""
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


def _live_suite(spec: SuiteGate, capture: Path, now: datetime, *, seed: int) -> Suite:
    """This run's sample of the traffic captured over the gate's window before ``now``.

    :raises BadInput: the capture cannot be read, or holds fewer usable cases than
        ``min_cases`` (the message gives the counts, never the content).
    """
    from rolloutd.evaluation.sampling import read_and_sample, suite_of

    sampled = spec.sampled
    assert sampled is not None
    sample, read = read_and_sample(
        capture, since=now - sampled.window, until=now, cases=sampled.cases, seed=seed
    )
    problems = len(read.problems)
    if sample.kept < sampled.min_cases:
        dropped = ", ".join(f"{n} {why}" for why, n in sample.dropped.items()) or "none"
        unread = f"; {problems} unreadable line(s)" if problems else ""
        raise BadInput.one(
            str(capture),
            "",
            f"{sample.kept} usable captured case(s) in the last {format_duration(sampled.window)}, "
            f"fewer than min_cases {sampled.min_cases} (dropped: {dropped}{unread})",
        )
    return suite_of(sample, str(capture))


def _seed(rollout_id: int, gate: str, now: datetime) -> int:
    """The sample's seed: the same rollout, gate and run time draw the same cases."""
    digest = hashlib.sha256(f"{rollout_id}/{gate}/{now.isoformat()}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _run_number(session: Session, canary: RunSummary, *, rollout_id: int, gate: str) -> int:
    """Which run of its suite the canary run is in the rollout: its share of alpha hangs on it."""
    if canary.run_id is None:
        return 1
    return records.run_number(
        session,
        rollout_id=rollout_id,
        gate=gate,
        suite_path=canary.suite_path,
        run_id=canary.run_id,
    )


def _with_id(run: RunSummary, run_id: int | None) -> RunSummary:
    if run_id is None:
        return run
    return replace(run, run_id=run_id)
