"""Running a reference suite gate's pair in the daemon: both pools answer, the answers are
scored, and the judge's scores are kept so that each answer is judged once.

The daemon's run of a suite gate (:func:`rolloutd.evaluation.schedule.run_suite_for_gate`)
is the same for both kinds of suite but for the asking: for a suite of reference answers,
:func:`answer_runs` asks both pools with :func:`~rolloutd.evaluation.references.answer_suite`
(each answer kept as it comes, so a run taken over asks only what is missing) and then scores
both runs together with the gate's scorer.

The judge's scores are kept by their cache key (``judge_scores``), rather than read back
from stored case results: a run is stored whole only once both builds' answers are scored,
so a run taken over after its holder died would otherwise ask the judge again about every
answer judged before; and the key holds the judge's configuration, so a changed rubric or
model is asked afresh, which a stored score alone could not tell.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.core.plan import JudgeSpec, SuiteGate
from rolloutd.errors import BadInput
from rolloutd.evaluation.exchange import Permit, RunnerOptions
from rolloutd.evaluation.judge import JudgeCache, api_key, judge_key
from rolloutd.evaluation.reference_records import answer_of_json
from rolloutd.evaluation.references import ReferenceResult, ReferenceRun, answer_suite, score_runs
from rolloutd.evaluation.results import RunRole
from rolloutd.evaluation.suite import Suite
from rolloutd.store import judge_scores

if TYPE_CHECKING:
    from rolloutd.store.types import Session

Transaction = Callable[[], AbstractContextManager["Session"]]
KeepFor = Callable[[RunRole], Callable[[int, ReferenceResult], Awaitable[None]]]


def unusable(spec: SuiteGate, name: str) -> str | None:
    """Why the gate cannot score a reference suite's answers (checked before any request),
    or None: no scorer, or the judge's key is not in the environment."""
    if spec.scorer is None:
        return (
            f"gate {name}: a suite of reference answers needs the gate's 'scorer' "
            "(exact, token_f1 or judge)"
        )
    if spec.judge is not None:
        try:
            api_key(spec.judge, f"gate {name}")
        except BadInput as exc:
            return str(exc)
    return None


async def answer_runs(
    suite: Suite,
    asks: Sequence[tuple[RunRole, str]],
    *,
    spec: SuiteGate,
    kept: Mapping[RunRole, Mapping[int, dict[str, Any]]],
    keep_for: KeepFor | None,
    options: RunnerOptions,
    clock: Callable[[], datetime],
    permit: Permit | None,
    read: Transaction,
    write: Transaction,
    source: str = "plan",
) -> list[ReferenceRun]:
    """Ask each (role, URL) of ``asks`` every case of the reference suite, in that order,
    then score the answers of all of them with the gate's scorer.

    ``kept`` holds the answers (as kept) an earlier attempt of the job kept, by role and
    position; ``keep_for(role)`` keeps each new one.
    """
    assert spec.scorer is not None  # unusable() said so before any request
    runs = await asyncio.gather(
        *(
            answer_suite(
                suite,
                url,
                role=role,
                options=options,
                clock=clock,
                permit=permit,
                kept={position: answer_of_json(data) for position, data in kept[role].items()},
                keep=None if keep_for is None else keep_for(role),
            )
            for role, url in asks
        )
    )
    return await score_keeping(
        suite,
        runs,
        spec.scorer,
        judge=spec.judge,
        read=read,
        write=write,
        clock=clock,
        source=source,
    )


async def score_keeping(
    suite: Suite,
    runs: Sequence[ReferenceRun],
    scorer: str,
    *,
    judge: JudgeSpec | None,
    read: Transaction,
    write: Transaction,
    clock: Callable[[], datetime],
    source: str = "plan",
) -> list[ReferenceRun]:
    """:func:`~rolloutd.evaluation.references.score_runs`, with the judge's scores read from
    and kept in the database: an answer any earlier run had judged is not judged again.

    :raises BadInput: ``scorer`` is ``judge`` without a judge, or the judge's key is unset.
    """
    if scorer != "judge" or judge is None:
        return await score_runs(suite, runs, scorer, judge=judge, source=source)
    cache = await asyncio.to_thread(_kept_cache, read, judge, suite, runs)
    known = set(cache.scores)
    scored = await score_runs(suite, runs, scorer, judge=judge, cache=cache, source=source)
    await asyncio.to_thread(_keep_new, write, cache, known, clock())
    return scored


def _kept_cache(
    read: Transaction, judge: JudgeSpec, suite: Suite, runs: Sequence[ReferenceRun]
) -> JudgeCache:
    cases = {case.id: case for case in suite.cases}
    keys = {
        judge_key(judge, cases[result.case_id], result.answer)
        for run in runs
        for result in run.cases
        if result.answer is not None
    }
    with read() as session:
        return JudgeCache(scores=judge_scores.scores_of(session, keys))


def _keep_new(write: Transaction, cache: JudgeCache, known: Collection[str], now: datetime) -> None:
    new = {key: score for key, score in cache.scores.items() if key not in known}
    if new:
        with write() as session:
            judge_scores.keep_scores(session, new, now=now)
