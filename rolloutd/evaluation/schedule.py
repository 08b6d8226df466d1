"""Running a due suite gate for a rollout step, storing the runs, and judging stored runs.

A run of a suite gate is a job of its own (see ``rolloutd.reconcile.runs``): the tick writes
it when :func:`~rolloutd.evaluation.gate.suite_due` says so, an evaluation reconciler runs it
with :func:`run_suite_for_gate` *off the tick thread* (a 300-case run against a 70B model
takes minutes), and every tick judges the newest stored runs with :func:`judge_stored`, so
the gate always has a current verdict without asking the engines again.

A gate's cases come from up to three sources, each run and judged the same way and counted
as one *look* in the gate's alpha spending: ``suite`` (a file), ``sampled`` (a second file)
and ``live`` (traffic the gateway captured, sampled afresh at each run: see
:mod:`rolloutd.evaluation.live`).

Endpoints: the canary is the canary pool's first replica and the baseline the stable pool's
first replica, unless the gate names ``endpoint`` / ``baseline_endpoint``. The
``at_least_baseline`` rule compares a file suite with the *shadow baseline*: the newest
baseline run of the same suite in this rollout, whichever gate stored it; the baseline is run
again only when there is none. A live sample is replayed to both pools every time. Requests
use temperature 0 and a fixed seed, so an unchanged build answers the same way each day.

Under a :class:`~rolloutd.evaluation.held.RunControl` the run is its job's: each case's
result is kept as it completes, and a run taken over after its holder died asks only the
cases that have none, then stores its runs whole, as an uninterrupted run would have.

A suite of reference answers (a RAG agent's replies) goes the same way: only the asking
differs (:mod:`rolloutd.evaluation.reference_runs`: answers, then the gate's scorer, the
judge's scores kept by key), and its pair is judged by
:func:`~rolloutd.evaluation.reference_gate.judge_reference`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rolloutd.clock import utc_now
from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.errors import BadInput
from rolloutd.evaluation import records, reference_runs
from rolloutd.evaluation.gate import combine, judge_suite
from rolloutd.evaluation.held import Keeper, RunControl, held
from rolloutd.evaluation.live import Unusable, live_suite, seed_of
from rolloutd.evaluation.records import StoredRun
from rolloutd.evaluation.reference_gate import judge_reference
from rolloutd.evaluation.references import ReferenceRun
from rolloutd.evaluation.results import RunRole, RunSummary
from rolloutd.evaluation.runner import RunnerOptions, run_suite_async
from rolloutd.evaluation.suite import Suite, load_suite
from rolloutd.gates.base import Evaluation, Role
from rolloutd.store import suite_jobs
from rolloutd.store.db import transaction

if TYPE_CHECKING:
    from rolloutd.store.types import Session, Sessions

LIVE = "live"
"""The label of a gate's ``sampled`` source: its cases are sampled afresh at each run from
the capture directory, which stands as the suite's path in the stored runs."""

_DESCRIBED = {"suite": "suite", "sampled": "sampled suite", LIVE: "live traffic sample"}


@dataclass(frozen=True)
class _Pair:
    """One suite's baseline and canary runs, and which run of its suite the canary is in the
    rollout (its share of alpha hangs on it)."""

    baseline: StoredRun
    canary: StoredRun
    number: int


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
    sessions: Sessions,
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

    :raises RunAbandoned: when ``control`` stopped the run; what it kept before stays.
    :raises NotLeading: (from ``rolloutd.reconcile``) the job or the lease was lost; nothing
        more was stored.
    """
    options = options or RunnerOptions(concurrency=spec.concurrency)
    job = None if control is None else control.job
    write = (lambda: transaction(sessions)) if control is None else control.write

    def run_one(label: str, path: Path) -> Evaluation | _Pair:
        suite: Suite | Unusable
        if label == LIVE:
            assert spec.sampled is not None
            suite = live_suite(
                lambda: transaction(sessions),
                write,
                sampled=spec.sampled,
                capture=path,
                until=now if job is None else job.due_at,
                seed=seed_of(
                    f"rollout-{rollout_id}/{name}/{now.isoformat()}" if job is None else job.name
                ),
                job=None if job is None else job.id,
                clock=clock,
            )
        else:
            try:
                suite = load_suite(path)
            except BadInput as exc:
                suite = Unusable(f"bad suite: {exc}")
            if not isinstance(suite, Unusable) and suite.is_reference:
                # Checked before any request: answers that could not be scored are wasted.
                why = reference_runs.unusable(spec, name)
                suite = suite if why is None else Unusable(f"{path}: {why}")
        if isinstance(suite, Unusable):
            return Evaluation(
                name, role, Verdict.INCONCLUSIVE, now, reason=suite.reason, evidence=suite.report
            )
        if job is not None:
            with transaction(sessions) as session:
                stored = _stored_pair(session, spec, suite, rollout_id, name, job.id)
            if stored is not None:
                return stored  # an earlier attempt of the job stored this suite's runs
        # A live sample is replayed to both pools at every run: the reference is what stable
        # answered when it was captured, and stable's replay tells a regression from
        # nondeterminism and from a reference that was wrong.
        baseline, canary = _run_pair(
            sessions, plan, spec, suite, rollout_id, options, clock, control, label != LIVE
        )
        with write() as session:
            ids = {}
            for run in (baseline, canary):
                if run.run_id is None:
                    ids[run.role] = records.store_run(
                        session,
                        run,
                        rollout_id=rollout_id,
                        step_index=step_index,
                        gate=name,
                        job_id=None if job is None else job.id,
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
        if label == LIVE:
            unusable = suite_jobs.newest_unusable_sample(session, rollout_id=rollout_id, gate=name)
            if unusable is not None and (
                canary is None or unusable.sampled_at >= canary.finished_at
            ):
                return Evaluation(
                    name,
                    role,
                    Verdict.INCONCLUSIVE,
                    now,
                    reason=unusable.reason or "",
                    evidence=unusable.report,
                )
        baseline = None
        if canary is not None and label == LIVE:
            # Only the replay to stable of the same sample, by the same job, is its baseline.
            job_id = None if canary.run_id is None else records.job_of_run(session, canary.run_id)
            baseline = records.latest_run(
                session,
                rollout_id=rollout_id,
                role="baseline",
                gate=name,
                suite_sha256=canary.suite_sha256,
                job_id=job_id,
            )
        elif canary is not None:
            baseline = records.latest_run(
                session,
                rollout_id=rollout_id,
                role="baseline",
                gate=None if spec.rule == "at_least_baseline" else name,
                suite_sha256=canary.suite_sha256,
            )
        if canary is None or baseline is None:
            reason = f"the {_DESCRIBED.get(label, label)} has not been run for this gate yet"
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
            found = _judge_pair(spec, found, name=name, role=role, now=now, looks=len(paths))
        evaluations.append(found)
    return combine(evaluations, [label for label, _ in paths])


def _judge_pair(
    spec: SuiteGate, pair: _Pair, *, name: str, role: Role, now: datetime, looks: int
) -> Evaluation:
    """Judge one suite's pair by the rules of its kind: tool calls or reference answers."""
    baseline, canary, run = pair.baseline, pair.canary, pair.number
    if isinstance(baseline, RunSummary) and isinstance(canary, RunSummary):
        return judge_suite(
            spec, baseline, canary, name=name, role=role, now=now, run=run, looks=looks
        )
    if isinstance(baseline, ReferenceRun) and isinstance(canary, ReferenceRun):
        return judge_reference(
            spec, baseline, canary, name=name, role=role, now=now, run=run, looks=looks
        )
    # Same digest, different kinds: cannot happen for one suite file; never passed.
    reason = "the baseline and canary runs are of different kinds of suite"
    return Evaluation(name, role, Verdict.INCONCLUSIVE, now, reason=reason)


def _stored_pair(
    session: Session, spec: SuiteGate, suite: Suite, rollout_id: int, gate: str, job_id: int
) -> _Pair | None:
    """The suite's runs the job stored already (both in one transaction), or None."""
    canary = records.latest_run(
        session, rollout_id=rollout_id, role="canary", suite_sha256=suite.sha256, job_id=job_id
    )
    if canary is None:
        return None
    baseline = records.latest_run(
        session, rollout_id=rollout_id, role="baseline", suite_sha256=suite.sha256, job_id=job_id
    )
    if baseline is None and spec.rule == "at_least_baseline":
        baseline = records.latest_run(
            session, rollout_id=rollout_id, role="baseline", suite_sha256=suite.sha256
        )
    if baseline is None:
        return None
    return _Pair(baseline, canary, _run_number(session, canary, rollout_id=rollout_id, gate=gate))


def _run_pair(
    sessions: Sessions,
    plan: Plan,
    spec: SuiteGate,
    suite: Suite,
    rollout_id: int,
    options: RunnerOptions,
    clock: Callable[[], datetime],
    control: RunControl | None,
    reuse_baseline: bool = True,
) -> tuple[StoredRun, StoredRun]:
    """The suite's baseline and canary runs: asked of the endpoints (only the cases an earlier
    attempt of the job did not keep), or the shadow baseline where the rule reuses it."""
    baseline_url, canary_url = endpoints(plan, spec)
    stored: StoredRun | None = None
    kept: dict[RunRole, dict[int, dict[str, Any]]] = {"canary": {}, "baseline": {}}
    started: datetime | None = None
    with transaction(sessions) as session:
        if spec.rule == "at_least_baseline" and reuse_baseline:
            stored = records.latest_run(
                session, rollout_id=rollout_id, role="baseline", suite_sha256=suite.sha256
            )
        if control is not None:
            job = control.job.id
            for kept_role in kept:
                kept[kept_role] = records.kept_json(
                    session, job_id=job, suite_sha256=suite.sha256, role=kept_role
                )
            started = records.first_kept_at(session, job_id=job, suite_sha256=suite.sha256)

    if control is not None:
        # Reading a day of capture may have taken a while: requests start on a fresh claim.
        control.renew()
    permit = None if control is None else control.permit
    asks: list[tuple[RunRole, str]] = [("canary", canary_url)]
    if stored is None:
        asks.append(("baseline", baseline_url))

    async def ask(keeper: Keeper | None) -> Sequence[StoredRun]:
        keep_for = None if keeper is None else keeper.keep_for
        if suite.is_reference:
            return await reference_runs.answer_runs(
                suite,
                asks,
                spec=spec,
                kept=kept,
                keep_for=keep_for,
                options=options,
                clock=clock,
                permit=permit,
                read=lambda: transaction(sessions),
                write=(lambda: transaction(sessions)) if control is None else control.write,
            )
        return await asyncio.gather(
            *(
                run_suite_async(
                    suite,
                    url,
                    role=role,
                    options=options,
                    clock=clock,
                    permit=permit,
                    kept={p: records.case_of_json(data) for p, data in kept[role].items()},
                    keep=None if keep_for is None else keep_for(role),
                )
                for role, url in asks
            )
        )

    async def both() -> Sequence[StoredRun]:
        if control is None:
            return await ask(None)
        keeper = Keeper(control, suite.sha256, clock)
        async with keeper.writing():
            return await ask(keeper)

    runs = asyncio.run(both() if control is None else held(both(), control))
    if started is not None:
        # Resumed: the run began when its first case was kept.
        runs = [replace(run, started_at=min(started, run.started_at)) for run in runs]
    return (stored if stored is not None else runs[1]), runs[0]


def _run_number(session: Session, canary: StoredRun, *, rollout_id: int, gate: str) -> int:
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


def _with_id(run: StoredRun, run_id: int | None) -> StoredRun:
    if run_id is None:
        return run
    return replace(run, run_id=run_id)
