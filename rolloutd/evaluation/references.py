"""Running a suite of reference answers: ask each case, then score each answer.

A reference case is asked as the runner asks a call case (the same retries, bounds,
temperature 0 and fixed seed; see :mod:`rolloutd.evaluation.runner`), without tools, with
its retrieved context put in the prompt as a system message ahead of the conversation. The
answer is the reply's text. A case the endpoint never answered usably is a *request
error*; an answer the scorer could not score (the judge failed or answered garbage) is a
*judge error*. Neither is a low score: both count for neither build, and the gate bounds
how many there may be.

Scoring is a second pass over the answers of both runs together (:func:`score_runs`), so an
answer both builds gave is judged once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import aiohttp

from rolloutd.clock import utc_now
from rolloutd.core.plan import JudgeSpec
from rolloutd.errors import BadInput
from rolloutd.evaluation.exchange import (
    Endpoint,
    Permit,
    Progress,
    RunnerOptions,
    ask_each,
    exchange,
    public_endpoint,
)
from rolloutd.evaluation.judge import JudgeCache, api_key, judge_answers, judge_key
from rolloutd.evaluation.results import RunRole
from rolloutd.evaluation.scorers import BUILT_IN
from rolloutd.evaluation.suite import Suite, SuiteCase

CONTEXT_HEADER = "Answer from the following context only.\n\n"


@dataclass(frozen=True)
class ReferenceResult:
    """One case's answer and its score, or why either is missing."""

    case_id: str
    answer: str | None
    score: float | None = None
    error: str | None = None
    judge_error: str | None = None
    attempts: int = 1
    latency_s: float | None = None

    @property
    def measured(self) -> bool:
        """Whether the endpoint answered (a request error is not judged)."""
        return self.answer is not None

    @property
    def scored(self) -> bool:
        """Whether the answer has a score."""
        return self.score is not None


@dataclass(frozen=True)
class ReferenceRun:
    """The cases of one run of a reference suite, in suite order."""

    suite_path: str
    suite_sha256: str
    endpoint: str
    role: RunRole
    cases: tuple[ReferenceResult, ...]
    started_at: datetime
    finished_at: datetime
    scorer: str | None = None
    run_id: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def request_errors(self) -> int:
        """Cases the endpoint never answered usably."""
        return sum(not case.measured for case in self.cases)

    @property
    def judge_errors(self) -> int:
        """Answered cases the scorer could not score."""
        return sum(case.measured and not case.scored for case in self.cases)

    @property
    def mean_score(self) -> float | None:
        """The mean score over the scored cases; None when none is scored."""
        scores = [case.score for case in self.cases if case.score is not None]
        return sum(scores) / len(scores) if scores else None

    def headline(self) -> dict[str, Any]:
        """The run's figures without the cases, as JSON-ready data."""
        mean = self.mean_score
        return {
            "run_id": self.run_id,
            "role": self.role,
            "endpoint": self.endpoint,
            "suite": self.suite_path,
            "suite_sha256": self.suite_sha256,
            "scorer": self.scorer,
            "cases": len(self.cases),
            "request_errors": self.request_errors,
            "judge_errors": self.judge_errors,
            "mean_score": None if mean is None else round(mean, 6),
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
        }

    def as_json(self) -> dict[str, Any]:
        """The headline and each case's score, or why it has none, with the answer."""
        return {
            **self.headline(),
            "results": [
                {
                    "case": case.case_id,
                    "score": None if case.score is None else round(case.score, 6),
                    "error": case.error,
                    "judge_error": case.judge_error,
                    "answer": case.answer,
                }
                for case in self.cases
            ],
        }


def reference_request(case: SuiteCase, model: str | None, options: RunnerOptions) -> dict[str, Any]:
    """The chat-completions request for one reference case: context first, no tools.

    With ``send_expected`` the references go along as ``rolloutd_reference``, which only
    the simulated engines read (to answer at their configured quality).
    """
    messages = list(case.messages)
    if case.context:
        chunks = "\n\n".join(f"[{i}] {chunk}" for i, chunk in enumerate(case.context, start=1))
        messages.insert(0, {"role": "system", "content": CONTEXT_HEADER + chunks})
    body: dict[str, Any] = {
        "messages": messages,
        "temperature": 0,
        "seed": options.seed,
        "max_tokens": options.max_tokens,
    }
    if model is not None:
        body["model"] = model
    if options.send_expected:
        body["rolloutd_reference"] = list(case.reference)
    return body


KeepAnswer = Callable[[int, ReferenceResult], Awaitable[None]]
"""Awaited with (position in the suite, result) after every case answered (see
``rolloutd.evaluation.held``)."""


async def answer_suite(
    suite: Suite,
    endpoint: str,
    *,
    role: RunRole = "canary",
    options: RunnerOptions | None = None,
    clock: Callable[[], datetime] = utc_now,
    permit: Permit | None = None,
    kept: Mapping[int, ReferenceResult] | None = None,
    keep: KeepAnswer | None = None,
    progress: Progress | None = None,
) -> ReferenceRun:
    """Ask ``endpoint`` every case of the reference suite; the answers are not yet scored.

    ``permit``, ``kept`` and ``keep`` are the call runner's
    (:func:`~rolloutd.evaluation.runner.run_suite_async`): a daemon's run asks only the cases
    an earlier attempt kept no answer for, and keeps each answer as it comes.

    :raises BadInput: the suite's cases expect tool calls, not reference answers.
    :raises RunAbandoned: ``permit`` refused a request.
    """
    if not suite.is_reference:
        raise BadInput.one(suite.path, "expected", "a suite of tool calls has no reference answers")
    options = options or RunnerOptions()
    started = clock()

    async def ask(
        session: aiohttp.ClientSession, target: Endpoint, case: SuiteCase, model: str | None
    ) -> ReferenceResult:
        return await _answer(session, target, case, model, options, permit)

    cases, model = await ask_each(suite, endpoint, ask, options, permit, kept, keep, progress)
    where = (suite.path, suite.sha256, public_endpoint(endpoint), role)
    return ReferenceRun(*where, tuple(cases), started, clock(), extra=options.recorded(model))


async def _answer(
    session: aiohttp.ClientSession,
    target: Endpoint,
    case: SuiteCase,
    model: str | None,
    options: RunnerOptions,
    permit: Permit | None,
) -> ReferenceResult:
    started = time.perf_counter()
    request = reference_request(case, model, options)
    raw, failure, attempts = await exchange(session, target, request, case.id, options, permit)
    if raw is None:
        return ReferenceResult(case.id, None, error=failure, attempts=attempts)
    answer = _text_of(raw)
    if answer is None:
        reason = "the response is not a chat completion"
        return ReferenceResult(case.id, None, error=reason, attempts=attempts)
    return ReferenceResult(
        case.id, answer, attempts=attempts, latency_s=time.perf_counter() - started
    )


def _text_of(raw: bytes) -> str | None:
    try:
        message = json.loads(raw)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    # An answer with no text (a tool call, an empty reply) is an answer, and a wrong one.
    return content if isinstance(content, str) else ""


async def score_runs(
    suite: Suite,
    runs: Sequence[ReferenceRun],
    scorer: str,
    *,
    judge: JudgeSpec | None = None,
    cache: JudgeCache | None = None,
    source: str = "plan",
) -> list[ReferenceRun]:
    """Score the answers of ``runs`` (runs of ``suite``) with ``scorer``; each distinct
    (case, answer) is judged once.

    :raises BadInput: ``scorer`` is ``judge`` without a judge, or the judge's key is unset.
    :raises ValueError: ``scorer`` is not a scorer's name.
    """
    cases = {case.id: case for case in suite.cases}
    if scorer in BUILT_IN:
        score = BUILT_IN[scorer]
        return [
            _scored(
                run, scorer, lambda r: (score(r.answer or "", cases[r.case_id].reference), None)
            )
            for run in runs
        ]
    if scorer != "judge":
        raise ValueError(f"unknown scorer {scorer!r}; expected exact, token_f1 or judge")
    if judge is None:
        raise BadInput.one(source, "judge", "scorer 'judge' needs a 'judge' section")
    cache = cache if cache is not None else JudgeCache()
    items = [
        (cases[result.case_id], result.answer)
        for run in runs
        for result in run.cases
        if result.answer is not None
    ]
    judged = await judge_answers(judge, items, cache, key=api_key(judge, source))

    def by_judge(result: ReferenceResult) -> tuple[float | None, str | None]:
        verdict = judged[judge_key(judge, cases[result.case_id], result.answer or "")]
        return verdict.score, verdict.error

    return [_scored(run, scorer, by_judge) for run in runs]


def _scored(
    run: ReferenceRun,
    scorer: str,
    score: Callable[[ReferenceResult], tuple[float | None, str | None]],
) -> ReferenceRun:
    results = []
    for result in run.cases:
        if result.answer is None:
            results.append(result)
            continue
        value, error = score(result)
        results.append(replace(result, score=value, judge_error=error))
    return replace(run, cases=tuple(results), scorer=scorer)
