"""Scoring reference answers with an LLM judge on an OpenAI-compatible endpoint, each once.

The judge is the team's own stronger model, asked at temperature 0 with the plan's rubric
(system message) and prompt (user message: the conversation, the retrieved context, the
reference and the answer). It must reply with a JSON object whose ``score`` is a number in
the plan's ``scale``; the score is mapped onto [0, 1]. A reply that is anything else (prose,
a score out of range, ``NaN``, a boolean) is *garbage*, refused, and counted as a judge
error: a score guessed out of free text would move the gate on the judge's phrasing.

Judge errors (transport failures, timeouts, 429/5xx after the retries, other HTTP errors,
garbage) are counted like the runner's request errors: the case has no score, so it counts
for neither build, and a run where more than the plan's ``max_errors`` went unscored is too
little measured.

**Cache.** A score is keyed by the sha256 of (the judge's configuration without its key, the
case, the answer): an unchanged answer, on the other pool or in the next day's run, is
scored once and gets the same score. Only scores are cached; an error may pass next time.

The API key comes from the environment variable the plan names and is sent as a Bearer
token; it is registered with :mod:`rolloutd.redact`, so no message or log carries it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from rolloutd.core.plan import JudgeSpec
from rolloutd.errors import BadInput
from rolloutd.evaluation.exchange import CHAT_PATH, RETRY_STATUSES, public_endpoint
from rolloutd.evaluation.suite import SuiteCase
from rolloutd.redact import register_secret, scrub

MAX_REPLY_BYTES = 256 * 1024
FORMAT_RULE = (
    'Reply with only a JSON object: {"score": <a number from LOW to HIGH>, "reason": '
    '"<one sentence>"}.'
)


@dataclass(frozen=True)
class Judged:
    """One answer's judgement: a score in [0, 1], or why there is none."""

    score: float | None
    error: str | None = None
    attempts: int = 1
    cached: bool = False


@dataclass
class JudgeCache:
    """Scores by the hash of (judge configuration, case, answer); counts what it saved."""

    scores: dict[str, float] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0


def judge_key(spec: JudgeSpec, case: SuiteCase, answer: str) -> str:
    """The cache key of ``answer`` to ``case`` under ``spec`` (the key's name, not its value)."""
    document = {
        "judge": {
            "url": public_endpoint(spec.url),
            "model": spec.model,
            "prompt": spec.prompt,
            "rubric": spec.rubric,
            "scale": list(spec.scale),
        },
        "case": {
            "id": case.id,
            "messages": list(case.messages),
            "context": list(case.context),
            "reference": list(case.reference),
        },
        "answer": answer,
    }
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def judge_messages(spec: JudgeSpec, case: SuiteCase, answer: str) -> list[dict[str, str]]:
    """The chat the judge is asked: the rubric with the reply format, then the filled prompt."""
    low, high = spec.bounds
    rule = FORMAT_RULE.replace("LOW", f"{low:g}").replace("HIGH", f"{high:g}")
    question = "\n".join(
        f"{message.get('role')}: {message.get('content', '')}" for message in case.messages
    )
    context = "\n".join(f"[{i}] {chunk}" for i, chunk in enumerate(case.context, start=1))
    filled = spec.prompt
    for name, value in (
        ("question", question),
        ("context", context or "(none)"),
        ("reference", "\n".join(case.reference)),
        ("answer", answer),
    ):
        filled = filled.replace("{" + name + "}", value)
    return [
        {"role": "system", "content": f"{spec.rubric}\n\n{rule}"},
        {"role": "user", "content": filled},
    ]


def parse_score(content: object, scale: tuple[float, float]) -> float | str:
    """The judge's score mapped onto [0, 1], or why the reply is refused (a string)."""
    if not isinstance(content, str):
        return "the reply has no text content"
    try:
        reply = json.loads(content.strip(), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return f"garbage score: not a JSON object: {_excerpt(content)}"
    if not isinstance(reply, dict) or "score" not in reply:
        return f"garbage score: no 'score' in {_excerpt(content)}"
    score = reply["score"]
    low, high = scale
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        return f"garbage score: 'score' is not a number: {_excerpt(json.dumps(score))}"
    if not low <= score <= high:
        return f"garbage score: {score:g} is outside the scale [{low:g}, {high:g}]"
    return (float(score) - low) / (high - low)


def _no_constant(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON number")


def _excerpt(text: str) -> str:
    one_line = " ".join(text.split())
    return repr(one_line[:80] + ("..." if len(one_line) > 80 else ""))


def api_key(spec: JudgeSpec, source: str = "plan") -> str | None:
    """The judge's API key from the environment, registered as a secret.

    :raises BadInput: the plan names a variable that is not set.
    """
    if spec.api_key_env is None:
        return None
    key = os.environ.get(spec.api_key_env)
    if not key:
        message = f"the environment variable {spec.api_key_env} (the judge's API key) is not set"
        raise BadInput.one(source, "judge.api_key_env", message)
    register_secret(key)
    return key


async def judge_answers(
    spec: JudgeSpec,
    items: Iterable[tuple[SuiteCase, str]],
    cache: JudgeCache,
    *,
    key: str | None = None,
    seed: int = 1234,
) -> dict[str, Judged]:
    """Judge every (case, answer), each distinct one once; results by :func:`judge_key`."""
    pending: dict[str, tuple[SuiteCase, str]] = {}
    results: dict[str, Judged] = {}
    for case, answer in items:
        digest = judge_key(spec, case, answer)
        if digest in results or digest in pending:
            continue
        if digest in cache.scores:
            cache.hits += 1
            results[digest] = Judged(cache.scores[digest], attempts=0, cached=True)
        else:
            pending[digest] = (case, answer)
    if not pending:
        return results
    cache.misses += len(pending)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    chat_url = spec.url.rstrip("/") + CHAT_PATH
    limit = asyncio.Semaphore(spec.concurrency)

    async def one(digest: str, case: SuiteCase, answer: str) -> None:
        async with limit:
            judged = await _ask(session, chat_url, spec, case, answer, seed)
        if judged.score is not None:
            cache.scores[digest] = judged.score
        results[digest] = judged

    connector = aiohttp.TCPConnector(limit=spec.concurrency)
    async with aiohttp.ClientSession(
        connector=connector, headers=headers, timeout=aiohttp.ClientTimeout()
    ) as session:
        await asyncio.gather(*(one(d, c, a) for d, (c, a) in pending.items()))
    return results


async def _ask(
    session: aiohttp.ClientSession,
    url: str,
    spec: JudgeSpec,
    case: SuiteCase,
    answer: str,
    seed: int,
) -> Judged:
    body = {
        "model": spec.model,
        "messages": judge_messages(spec, case, answer),
        "temperature": 0,
        "seed": seed,
        "max_tokens": 256,
    }
    reason = "not sent"
    for attempt in range(1, spec.retries + 2):
        if attempt > 1:
            await asyncio.sleep(min(0.25 * 2 ** (attempt - 2), 5.0))
        try:
            async with (
                asyncio.timeout(spec.timeout),
                session.post(url, json=body, allow_redirects=False) as response,
            ):
                status = response.status
                raw = await response.content.read(MAX_REPLY_BYTES + 1)
        except TimeoutError:
            # A judge slower than its timeout may be busy: try again, then count an error.
            reason = f"judge timed out after {spec.timeout:g}s"
            continue
        except aiohttp.ClientError as exc:
            # Refused or reset: the judge may be restarting; try again.
            detail = " ".join(str(exc).split())[:200]
            reason = scrub(f"judge unreachable: {type(exc).__name__}: {detail}")
            continue
        if status in RETRY_STATUSES:
            reason = f"judge answered HTTP {status}"
            continue
        if status != 200:
            return Judged(None, f"judge answered HTTP {status}", attempt)
        if len(raw) > MAX_REPLY_BYTES:
            return Judged(None, "judge's reply is too large", attempt)
        parsed = parse_score(_content(raw), spec.bounds)
        if isinstance(parsed, str):
            # The same prompt at temperature 0 gets the same reply: no retry.
            return Judged(None, scrub(parsed), attempt)
        return Judged(parsed, None, attempt)
    return Judged(None, reason, spec.retries + 1)


def _content(raw: bytes) -> object:
    try:
        reply: Mapping[str, Any] = json.loads(raw)
        return reply["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
