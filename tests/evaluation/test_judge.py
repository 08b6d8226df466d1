"""The LLM judge scorer against a simulated judge on 127.0.0.1 speaking OpenAI chat completions:
normal scores, 5xx and timeouts bounded as judge errors, garbage scores refused, the cache."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from rolloutd.core.plan import JudgeSpec
from rolloutd.errors import BadInput
from rolloutd.evaluation.judge import JudgeCache, api_key, judge_answers, judge_key, parse_score
from rolloutd.evaluation.suite import SuiteCase
from tests.evaluation.conftest import closed_port, engine

CASE = SuiteCase(
    "support-0001",
    1,
    ({"role": "user", "content": "How long do I have to return boots?"},),
    (),
    context=("Unworn footwear may be returned within 60 days.",),
    reference=("60 days, if unworn.",),
)
KEY = "sk-judge-7f3a9c1e5b2d4086"


def reply(content: str, status: int = 200) -> web.Response:
    """A chat completion carrying ``content``."""
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
    return web.json_response(body, status=status)


class Judge:
    """A simulated judge: records each request, answers with ``answer(request_number, body)``."""

    def __init__(self, answer: Callable[[int, dict[str, Any]], Any]) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization"))
        result = self.answer(len(self.requests), body)
        if asyncio.iscoroutine(result):
            result = await result
        assert isinstance(result, web.StreamResponse)
        return result


def spec(url: str, **changes: Any) -> JudgeSpec:
    """A judge spec with fast retries and a short timeout."""
    data: dict[str, Any] = {"url": url, "model": "judge-70b", "timeout": 2.0, "retries": 2}
    data.update(changes)
    return JudgeSpec(**data)


def judge_one(judge: JudgeSpec, answer: str, cache: JudgeCache | None = None, **kw: Any) -> Any:
    """Judge one answer to CASE; returns its Judged."""
    cache = cache if cache is not None else JudgeCache()
    found = asyncio.run(judge_answers(judge, [(CASE, answer)], cache, **kw))
    return found[judge_key(judge, CASE, answer)]


def test_a_score_is_read_and_mapped_onto_zero_to_one() -> None:
    """A 1-5 judge's 4 is 0.75; the request is at temperature 0 with the rubric and a Bearer key."""
    server = Judge(lambda n, body: reply('{"score": 4, "reason": "supported"}'))
    with engine(server.handle) as url:
        judged = judge_one(
            spec(url, scale=[1, 5], rubric="Grade faithfulness."), "60 days", key=KEY
        )
    assert judged.score == 0.75 and judged.error is None
    body = server.requests[0]
    assert body["temperature"] == 0 and body["model"] == "judge-70b"
    assert body["messages"][0]["content"].startswith("Grade faithfulness.")
    assert "60 days" in body["messages"][1]["content"]
    assert "Unworn footwear" in body["messages"][1]["content"]
    assert server.authorizations == [f"Bearer {KEY}"]


def test_a_5xx_is_retried_and_a_lasting_one_is_a_judge_error() -> None:
    """One 503 then a score: scored on the second attempt. Always 503: no score, an error."""
    flaky = Judge(lambda n, body: reply("x", 503) if n == 1 else reply('{"score": 1}'))
    with engine(flaky.handle) as url:
        judged = judge_one(spec(url), "60 days")
    assert judged.score == 1.0 and judged.attempts == 2
    down = Judge(lambda n, body: reply("overloaded", 503))
    with engine(down.handle) as url:
        judged = judge_one(spec(url, retries=1), "60 days")
    assert judged.score is None and judged.error == "judge answered HTTP 503"
    assert len(down.requests) == 2


def test_a_judge_that_does_not_answer_in_time_is_a_judge_error() -> None:
    """A reply slower than the timeout, every time: no score, 'timed out'."""

    async def slow(n: int, body: dict[str, Any]) -> web.Response:
        await asyncio.sleep(5)
        return reply('{"score": 1}')

    with engine(Judge(slow).handle) as url:
        judged = judge_one(spec(url, timeout=0.2, retries=1), "60 days")
    assert judged.score is None and judged.error == "judge timed out after 0.2s"


def test_an_unreachable_judge_is_a_judge_error() -> None:
    """Connection refused after the retries: no score."""
    judged = judge_one(spec(f"http://127.0.0.1:{closed_port()}", retries=0), "60 days")
    assert judged.score is None and judged.error is not None
    assert judged.error.startswith("judge unreachable")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("The answer is faithful, I'd say 0.9.", "not a JSON object"),
        ('{"reason": "fine"}', "no 'score'"),
        ('{"score": "high"}', "not a number"),
        ('{"score": true}', "not a number"),
        ('{"score": NaN}', "not a JSON object"),
        ('{"score": 7}', "outside the scale"),
        ('{"score": -0.1}', "outside the scale"),
        ("[0.9]", "no 'score'"),
    ],
)
def test_garbage_scores_are_refused_not_guessed(content: str, why: str) -> None:
    """Prose, or a missing, non-numeric, non-finite or out-of-scale score: refused, asked once."""
    server = Judge(lambda n, body: reply(content))
    with engine(server.handle) as url:
        judged = judge_one(spec(url), "60 days")
    assert judged.score is None
    assert judged.error.startswith("garbage score") and why in judged.error
    assert len(server.requests) == 1


def test_a_reply_that_is_not_a_chat_completion_is_refused() -> None:
    """A 200 without choices is a judge error."""
    with engine(Judge(lambda n, body: web.json_response({"ok": True})).handle) as url:
        judged = judge_one(spec(url), "60 days")
    assert judged.score is None and "no text content" in judged.error


def test_each_case_and_answer_is_judged_once() -> None:
    """The same answer from two runs is one request; asked again, none; a new answer, one more."""
    server = Judge(lambda n, body: reply('{"score": 1}'))
    cache = JudgeCache()
    with engine(server.handle) as url:
        judge = spec(url)
        first = asyncio.run(judge_answers(judge, [(CASE, "60 days"), (CASE, "60 days")], cache))
        again = asyncio.run(judge_answers(judge, [(CASE, "60 days")], cache))
        other = asyncio.run(judge_answers(judge, [(CASE, "90 days")], cache))
    assert len(server.requests) == 2
    assert len(first) == 1 and next(iter(again.values())).cached
    assert next(iter(other.values())).score == 1.0
    assert (cache.hits, cache.misses) == (1, 2)


def test_the_cache_key_changes_with_the_judge_case_and_answer_but_not_the_key() -> None:
    """Another rubric, reference or answer is another key; the API key's value is not in it."""
    judge = spec("http://127.0.0.1:9", api_key_env="JUDGE_KEY")
    base = judge_key(judge, CASE, "60 days")
    other_case = SuiteCase(CASE.id, 1, CASE.messages, (), reference=("90 days",))
    assert base != judge_key(judge.model_copy(update={"rubric": "Be strict."}), CASE, "60 days")
    assert base != judge_key(judge, other_case, "60 days")
    assert base != judge_key(judge, CASE, "60 days.")
    assert base == judge_key(judge, CASE, "60 days")


def test_the_api_key_never_appears_in_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge that echoes the key in its 401 body and in a garbage reply: the errors omit it."""
    monkeypatch.setenv("JUDGE_KEY", KEY)
    echo = Judge(
        lambda n, body: reply(f"bad key {KEY}", 401) if n == 1 else reply(f"token {KEY} ok")
    )
    with engine(echo.handle) as url:
        judge = spec(url, api_key_env="JUDGE_KEY")
        key = api_key(judge)
        refused = judge_one(judge, "60 days", key=key)
        garbage = judge_one(judge, "61 days", key=key)
    assert refused.error == "judge answered HTTP 401"
    assert garbage.error is not None and KEY not in garbage.error and "***" in garbage.error
    assert echo.authorizations[0] == f"Bearer {KEY}"


def test_an_unset_key_variable_is_bad_input_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """api_key_env naming an unset variable is refused with the plan field."""
    monkeypatch.delenv("JUDGE_KEY_MISSING", raising=False)
    with pytest.raises(BadInput, match=r"judge\.api_key_env: the environment variable JUDGE_KEY"):
        api_key(spec("http://127.0.0.1:9", api_key_env="JUDGE_KEY_MISSING"), "plan.yaml")


def test_parse_score_accepts_exactly_a_number_in_the_scale() -> None:
    """Integers and floats inside the scale are scores; the edges are included."""
    assert parse_score('{"score": 0}', (0.0, 1.0)) == 0.0
    assert parse_score(' {"score": 1.0, "reason": "x"} ', (0.0, 1.0)) == 1.0
    assert parse_score('{"score": 3}', (1.0, 5.0)) == 0.5
    assert isinstance(parse_score(json.dumps({"score": 1.01}), (0.0, 1.0)), str)
