"""The runner against real simulated replicas: profiles, value errors, timeouts, retries."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web

from rolloutd.evaluation.compare import Call, CaseResult, score_case
from rolloutd.evaluation.results import RunSummary
from rolloutd.evaluation.runner import (
    RunAbandoned,
    RunnerOptions,
    public_endpoint,
    run_suite,
    run_suite_async,
)
from rolloutd.evaluation.suite import Suite, SuiteCase
from tests.evaluation.conftest import SIM, closed_port, engine, start

NO_CALL = {"choices": [{"message": {"content": "no"}}]}


async def drip(request: web.Request) -> web.StreamResponse:
    """An answer whose body never ends: a space every 50 ms."""
    response = web.StreamResponse()
    await response.prepare(request)
    while True:
        await asyncio.sleep(0.05)
        await response.write(b" ")


def test_the_exact_profile_scores_every_case_right_both_ways(
    profile_runs: dict[str, RunSummary],
) -> None:
    """A build that copies every argument exactly scores 100% strict and schema-aware."""
    run = profile_runs["exact"]
    assert run.exactness == run.strict_exactness == 1.0
    assert run.outcomes["correct"] == 300


def test_int4_like_is_visibly_lower_under_strict_and_the_gap_is_format_per_field(
    profile_runs: dict[str, RunSummary],
) -> None:
    """The strict score is far below the schema-aware one, and the gap is format deviations.

    Per field, every value the strict score rejects but the schema-aware score accepts is a
    format deviation (or a reordered nested object or set, correct as data): no value
    error is hidden in the gap.
    """
    run = profile_runs["int4-like"]
    assert run.exactness is not None and run.strict_exactness is not None
    assert run.exactness - run.strict_exactness > 0.3
    format_fields = 0
    for case in run.cases:
        for result in case.fields:
            if result.good and not result.strict_correct:
                reordered = result.outcome == "correct" and isinstance(result.actual, dict | list)
                assert result.outcome == "format" or reordered, (case.case_id, result)
                format_fields += result.outcome == "format"
    assert format_fields > 20
    tallies = run.fields
    assert tallies["issue_payout.memo"].counts.get("format", 0) > 0
    assert tallies["create_booking.check_in"].counts.get("format", 0) > 0


def test_int4_like_value_errors_are_caught_and_attributed_to_their_fields(
    profile_runs: dict[str, RunSummary],
) -> None:
    """Real copying errors (~3% of fields) show as wrong values on the fields that have them."""
    run = profile_runs["int4-like"]
    wrong = [
        (case.field_key(result), result)
        for case in run.cases
        for result in case.fields
        if result.outcome == "wrong_value"
    ]
    fields = sum(len(case.fields) for case in run.cases)
    assert 0.01 <= len(wrong) / fields <= 0.06
    assert len({key for key, _ in wrong}) >= 8
    assert all(result.actual != result.expected for _, result in wrong)


def test_an_exactness_drop_is_attributed_to_one_field_per_call(example_suite: Suite) -> None:
    """With the exactness-drop fault each damaged call has exactly one wrong argument."""
    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:120])
    replica = start("exact")
    try:
        replica.set_faults(exactness_drop=0.2)
        run = run_suite(suite, replica.url, options=SIM)
    finally:
        replica.stop()
    damaged = [case for case in run.cases if case.exact is False]
    assert 12 <= len(damaged) <= 40
    for case in damaged:
        wrong = [result for result in case.fields if not result.good]
        assert len(wrong) == 1, case
        assert wrong[0].outcome == "wrong_value"
    assert run.request_errors == 0


def test_broken_schema_shows_as_schema_violations(profile_runs: dict[str, RunSummary]) -> None:
    """Every call of the broken-schema profile is a schema violation, none a request error."""
    run = profile_runs["broken-schema"]
    assert run.outcomes["schema_violation"] == 300
    assert run.schema_violation_rate == 1.0
    assert run.request_errors == 0


def test_a_timeout_heavy_endpoint_yields_request_errors_not_wrong_answers(
    example_suite: Suite,
) -> None:
    """Timed-out requests are request errors; every answered case is still judged right."""
    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:80])
    replica = start("exact")
    try:
        replica.set_faults(timeout_rate=0.6)
        run = run_suite(suite, replica.url, options=dataclasses.replace(SIM, retries=0))
    finally:
        replica.stop()
    assert 25 <= run.request_errors <= 70
    assert run.outcomes["correct"] == run.measured
    assert run.exactness == 1.0
    errors = [case for case in run.cases if not case.measured]
    assert all(case.error and "503" in case.error for case in errors)
    assert all(case.exact is None for case in errors)


def test_a_client_timeout_is_retried_then_a_request_error(example_suite: Suite) -> None:
    """A request slower than the timeout is tried retries+1 times, then recorded, not scored."""
    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:3])
    calls = Counter[str]()

    async def slow(request: web.Request) -> web.Response:
        calls[request.path] += 1
        await asyncio.sleep(60)
        return web.json_response(NO_CALL)

    options = RunnerOptions(model="m", timeout_s=0.2, retries=2, backoff_s=0.001)
    with engine(slow) as url:
        run = run_suite(suite, url, options=options)
    assert calls["/v1/chat/completions"] == 9
    assert run.request_errors == 3
    assert all(case.attempts == 3 and "timed out" in (case.error or "") for case in run.cases)


def test_a_retry_that_succeeds_is_scored_normally(example_suite: Suite) -> None:
    """A 503 then a good answer: the case is judged on the answer, with two attempts."""
    case = example_suite.cases[0]
    answers = iter([503, 200])

    async def flaky(request: web.Request) -> web.Response:
        if next(answers) == 503:
            return web.json_response({"error": {"message": "busy"}}, status=503)
        arguments = json.dumps(case.expected_arguments)
        call = {"function": {"name": case.expected_name, "arguments": arguments}}
        return web.json_response({"choices": [{"message": {"tool_calls": [call]}}]})

    suite = dataclasses.replace(example_suite, cases=(case,))
    options = RunnerOptions(model="m", backoff_s=0.001)
    with engine(flaky) as url:
        run = run_suite(suite, url, options=options)
    (result,) = run.cases
    assert (result.outcome, result.attempts) == ("correct", 2)
    assert result == dataclasses.replace(
        score_case(case, Call(case.expected_name, result.arguments)),
        attempts=2,
        latency_s=result.latency_s,
    )


def test_requests_are_deterministic_and_carry_temperature_zero_and_a_seed(
    example_suite: Suite,
) -> None:
    """Each request asks for temperature 0 and the fixed seed, with the case's tools."""
    seen: list[dict[str, object]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response(NO_CALL)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    options = RunnerOptions(model="atlas", seed=7)
    with engine(record) as url:
        run = run_suite(suite, url, options=options)
    assert [case.outcome for case in run.cases] == ["no_call", "no_call"]
    assert all(body["temperature"] == 0 and body["seed"] == 7 for body in seen)
    assert all(body["model"] == "atlas" and "rolloutd_expected" not in body for body in seen)
    assert [body["tools"] for body in seen] == [case.openai_tools() for case in suite.cases]


def test_the_stored_endpoint_has_no_credentials() -> None:
    """Userinfo and query strings are dropped from the endpoint kept with a run."""
    url = "https://ops:s3cret@engine.internal:8443/v1base/?api_key=abc"
    assert public_endpoint(url) == "https://engine.internal:8443/v1base"


def test_userinfo_is_sent_as_basic_auth_and_the_query_with_every_request(
    example_suite: Suite,
) -> None:
    """The endpoint's userinfo becomes an Authorization header and its query string goes with
    every request, the model list's too; the stored endpoint has neither."""
    seen: list[tuple[str, str, str | None]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.path, request.query_string, request.headers.get("Authorization")))
        return web.json_response(NO_CALL)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    with engine(record) as url:
        base = url.replace("http://", "http://ops:s%40cret@") + "/gateway/?api_key=k3y"
        run = run_suite(suite, base, options=RunnerOptions(retries=0))
    basic = "Basic " + base64.b64encode(b"ops:s@cret").decode()
    assert sorted(seen) == [
        ("/gateway/v1/chat/completions", "api_key=k3y", basic),
        ("/gateway/v1/chat/completions", "api_key=k3y", basic),
        ("/gateway/v1/models", "api_key=k3y", basic),
    ]
    assert run.endpoint == url + "/gateway"


def test_a_refused_connection_is_a_request_error_that_names_no_credentials(
    example_suite: Suite,
) -> None:
    """Nothing listening: each case is tried retries+1 times, then a request error that says
    the connection failed, without the endpoint's password or query string."""
    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    url = f"http://ops:pa55word@127.0.0.1:{closed_port()}/?api_key=k3y-in-query"
    run = run_suite(suite, url, options=RunnerOptions(model="m", retries=1, backoff_s=0.001))
    assert run.request_errors == 2
    for case in run.cases:
        assert case.attempts == 2 and (case.error or "").startswith("ConnectError: ")
        assert "pa55word" not in (case.error or "") and "k3y-in-query" not in (case.error or "")


def test_http_errors_and_answers_that_are_not_completions_are_request_errors_at_once(
    example_suite: Suite,
) -> None:
    """A 404 with an OpenAI error body, a 400 in plain text, a redirect (not followed) and a
    200 that is not JSON are each a request error after one attempt, saying what came back."""
    answers = {
        "404": web.json_response({"error": {"message": "no such model"}}, status=404),
        "400": web.Response(status=400, text="prompt too long"),
        "307": web.Response(status=307, headers={"Location": "/elsewhere"}),
        "200": web.Response(text="<html>busy</html>", content_type="text/html"),
    }
    order = iter(answers)

    async def answer(request: web.Request) -> web.Response:
        return answers[next(order)]

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:4])
    options = RunnerOptions(model="m", concurrency=1, backoff_s=0.001)
    with engine(answer) as url:
        run = run_suite(suite, url, options=options)
    assert [(case.error, case.attempts) for case in run.cases] == [
        ("HTTP 404: no such model", 1),
        ("HTTP 400: prompt too long", 1),
        ("HTTP 307: Temporary Redirect", 1),
        ("the response is not a chat completion", 1),
    ]


def test_a_run_is_stamped_by_the_clock_it_is_given(example_suite: Suite) -> None:
    """The run's start and finish are the given clock's times, decades from the wall clock."""
    past = datetime(1999, 12, 31, 23, 0, tzinfo=UTC)
    times = iter([past, past + timedelta(minutes=5)])

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(NO_CALL)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    with engine(answer) as url:
        run = run_suite(suite, url, options=RunnerOptions(model="m"), clock=lambda: next(times))
    assert (run.started_at, run.finished_at) == (past, past + timedelta(minutes=5))


def test_a_withdrawn_permit_abandons_the_run_before_the_next_request(
    example_suite: Suite,
) -> None:
    """The permit is asked before the run and before every request, with the request's
    timeout; once it says no, the run raises and sends nothing more."""
    asked: list[float] = []
    sent = Counter[str]()

    async def answer(request: web.Request) -> web.Response:
        sent[request.path] += 1
        return web.json_response(NO_CALL)

    def permit(timeout_s: float) -> bool:
        asked.append(timeout_s)
        return len(asked) <= 4  # the run's start, then three requests

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:10])
    options = RunnerOptions(model="m", concurrency=1, timeout_s=7.0)
    with engine(answer) as url, pytest.raises(RunAbandoned):
        asyncio.run(run_suite_async(suite, url, options=options, permit=permit))
    assert sent["/v1/chat/completions"] == 3
    assert set(asked) == {7.0}


def test_kept_results_are_not_asked_again_and_each_new_one_is_kept_before_the_next(
    example_suite: Suite,
) -> None:
    """A run given the results an earlier attempt kept asks only the other cases, awaits
    ``keep`` with each new result before its worker sends the next request, and returns
    every case in suite order; with every result kept it asks nothing at all."""
    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:10])
    asked: list[str] = []
    kept_now: list[int] = []

    async def answer(request: web.Request) -> web.Response:
        case = json.loads(await request.read())["rolloutd_expected"]["name"]
        asked.append(case)
        assert len(asked) == len(kept_now) + 1, "a request went out before the last was kept"
        return web.json_response(NO_CALL)

    async def keep(position: int, result: CaseResult) -> None:
        await asyncio.sleep(0.01)
        kept_now.append(position)

    earlier = {
        position: CaseResult(suite.cases[position].id, "no_call", "t", False, False, None)
        for position in (0, 3, 4, 9)
    }
    options = RunnerOptions(model="m", concurrency=1, send_expected=True)
    with engine(answer) as url:
        run = asyncio.run(run_suite_async(suite, url, options=options, kept=earlier, keep=keep))
        whole = dict(enumerate(run.cases))
        again = asyncio.run(run_suite_async(suite, url, options=options, kept=whole, keep=keep))
    assert kept_now == [1, 2, 5, 6, 7, 8]
    assert len(asked) == 6
    assert [case.case_id for case in run.cases] == [case.id for case in suite.cases]
    assert all(run.cases[position] is result for position, result in earlier.items())
    assert again.cases == run.cases


def test_a_slowly_dripping_answer_is_cut_at_the_request_timeout(example_suite: Suite) -> None:
    """The timeout bounds the whole request, answer included, so an answer that trickles in
    byte by byte cannot outlast the timeout a permit was given for."""
    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:1])
    options = RunnerOptions(model="m", timeout_s=0.5, retries=0)
    with engine(drip) as url:
        started = time.monotonic()
        run = run_suite(suite, url, options=options)
        assert time.monotonic() - started < 5.0
    (case,) = run.cases
    assert case.outcome == "request_error" and "timed out after 0.5s" in (case.error or "")


def test_a_model_list_that_never_finishes_leaves_the_model_out(example_suite: Suite) -> None:
    """``/v1/models`` is only a courtesy: one that hangs past the timeout is given up, and the
    run goes on without naming a model."""
    seen: list[dict[str, object]] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.path == "/v1/models":
            return await drip(request)
        seen.append(await request.json())
        return web.json_response(NO_CALL)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    options = RunnerOptions(timeout_s=0.3, retries=0)
    with engine(answer) as url:
        run = run_suite(suite, url, options=options)
    assert [case.outcome for case in run.cases] == ["no_call", "no_call"]
    assert all("model" not in body for body in seen)


def _answer_of_size(case: SuiteCase, size: int) -> bytes:
    """A chat completion with the case's expected call, padded with spaces to ``size`` bytes."""
    arguments = json.dumps(case.expected_arguments)
    call = {"function": {"name": case.expected_name, "arguments": arguments}}
    body = json.dumps({"choices": [{"message": {"tool_calls": [call]}}]}).encode()
    return body + b" " * (size - len(body))


def test_an_answer_over_the_size_limit_is_a_request_error_and_one_under_it_is_scored(
    example_suite: Suite,
) -> None:
    """A 2 MiB answer is refused after one attempt, counted as a request error; an answer of
    1 MiB less one byte is scored as usual."""
    case = example_suite.cases[0]
    sizes = iter([2 * 1024 * 1024, 1024 * 1024 - 1])

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=_answer_of_size(case, next(sizes)))

    suite = dataclasses.replace(example_suite, cases=(case, case))
    options = RunnerOptions(model="m", concurrency=1, backoff_s=0.001)
    with engine(answer) as url:
        run = run_suite(suite, url, options=options)
    refused, accepted = run.cases
    assert (refused.outcome, refused.error, refused.attempts) == (
        "request_error",
        "answer larger than 1 MiB",
        1,
    )
    assert accepted.outcome == "correct"
    assert run.request_errors == 1


def test_an_endless_answer_is_cut_at_the_size_limit_not_at_the_timeout(
    example_suite: Suite,
) -> None:
    """The body is read only up to the limit: an answer that never ends is refused for its
    size as soon as it passes the limit, without waiting for the timeout."""

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        while True:
            await response.write(b" " * 65536)
            await asyncio.sleep(0.001)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:1])
    options = RunnerOptions(model="m", timeout_s=30, retries=0, max_answer_bytes=256 * 1024)
    with engine(endless) as url:
        started = time.monotonic()
        run = run_suite(suite, url, options=options)
        elapsed = time.monotonic() - started
    (case,) = run.cases
    assert case.error == "answer larger than 256 KiB"
    assert elapsed < 15


def test_answers_that_are_not_completions_are_request_errors_that_say_so_in_one_line(
    example_suite: Suite,
) -> None:
    """JSON nested past the recursion limit, tool calls that are not a list, and an HTML error
    page over several lines are each a request error, not a crash of the run."""
    answers = [
        web.Response(text="[" * 100_000),
        web.json_response({"choices": [{"message": {"tool_calls": {"a": 1}}}]}),
        web.Response(status=500, text="<html>\n<body>Internal\n   error</body>\n</html>"),
        web.Response(status=500, text="[" * 100_000),
    ]
    order = iter(answers)

    async def answer(request: web.Request) -> web.Response:
        return next(order)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:4])
    options = RunnerOptions(model="m", concurrency=1, retries=0)
    with engine(answer) as url:
        run = run_suite(suite, url, options=options)
    errors = [case.error or "" for case in run.cases]
    assert errors[:3] == [
        "the response is not a chat completion",
        "the response is not a chat completion",
        "HTTP 500: <html> <body>Internal error</body> </html>",
    ]
    assert errors[3].startswith("HTTP 500: [[[") and len(errors[3]) <= 210


@pytest.mark.parametrize(
    "listing",
    [b'{"data": {"id": "m"}}', b'{"data": 5}', b'["m"]', b"[" * 100_000],
    ids=["data-object", "data-number", "list", "deep"],
)
def test_a_model_list_of_the_wrong_shape_leaves_the_model_out(
    example_suite: Suite, listing: bytes
) -> None:
    """A ``/v1/models`` answer that is not a list of models is ignored, like one that hangs."""
    seen: list[dict[str, object]] = []

    async def answer(request: web.Request) -> web.Response:
        if request.path == "/v1/models":
            return web.Response(body=listing)
        seen.append(await request.json())
        return web.json_response(NO_CALL)

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:1])
    with engine(answer) as url:
        run = run_suite(suite, url, options=RunnerOptions(retries=0))
    assert [case.outcome for case in run.cases] == ["no_call"]
    assert seen and "model" not in seen[0]


def test_arguments_nested_past_the_recursion_limit_are_a_schema_violation(
    example_suite: Suite,
) -> None:
    """A call whose arguments nest too deeply to read is scored as a malformed call."""
    case = example_suite.cases[0]

    async def answer(request: web.Request) -> web.Response:
        call = {"function": {"name": case.expected_name, "arguments": "[" * 100_000}}
        return web.json_response({"choices": [{"message": {"tool_calls": [call]}}]})

    suite = dataclasses.replace(example_suite, cases=(case,))
    with engine(answer) as url:
        run = run_suite(suite, url, options=RunnerOptions(model="m", retries=0))
    (result,) = run.cases
    assert result.outcome == "schema_violation"
    assert result.schema_errors == ("the arguments nest lists and objects deeper than 64 levels",)


def test_runner_options_refuse_a_timeout_that_is_not_finite() -> None:
    """nan and inf are not timeouts: asyncio would wait forever or fail on every request."""
    for timeout in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match="finite positive"):
            RunnerOptions(timeout_s=timeout)
