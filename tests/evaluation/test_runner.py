"""The runner against real simulated replicas: profiles, value errors, timeouts, retries."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from rolloutd.evaluation.compare import Call, score_case
from rolloutd.evaluation.results import RunSummary
from rolloutd.evaluation.runner import (
    RunAbandoned,
    RunnerOptions,
    public_endpoint,
    run_suite,
    run_suite_async,
)
from rolloutd.evaluation.suite import Suite
from tests.evaluation.conftest import SIM, start


class Drip(httpx.AsyncByteStream):
    """A response body that never ends: a space every 50 ms."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0.05)
            yield b" "


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

    async def slow(request: httpx.Request) -> httpx.Response:
        calls[request.url.path] += 1
        raise httpx.ReadTimeout("slow", request=request)

    options = RunnerOptions(model="m", timeout_s=0.5, retries=2, backoff_s=0.001)
    run = run_suite(suite, "http://engine", options=options, transport=httpx.MockTransport(slow))
    assert calls["/v1/chat/completions"] == 9
    assert run.request_errors == 3
    assert all(case.attempts == 3 and "timed out" in (case.error or "") for case in run.cases)


def test_a_retry_that_succeeds_is_scored_normally(example_suite: Suite) -> None:
    """A 503 then a good answer: the case is judged on the answer, with two attempts."""
    case = example_suite.cases[0]
    answers = iter([503, 200])

    async def flaky(request: httpx.Request) -> httpx.Response:
        if next(answers) == 503:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        arguments = json.dumps(case.expected_arguments)
        call = {"function": {"name": case.expected_name, "arguments": arguments}}
        return httpx.Response(200, json={"choices": [{"message": {"tool_calls": [call]}}]})

    suite = dataclasses.replace(example_suite, cases=(case,))
    options = RunnerOptions(model="m", backoff_s=0.001)
    run = run_suite(suite, "http://engine", options=options, transport=httpx.MockTransport(flaky))
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

    async def record(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "no"}}]})

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    options = RunnerOptions(model="atlas", seed=7)
    run = run_suite(suite, "http://e", options=options, transport=httpx.MockTransport(record))
    assert [case.outcome for case in run.cases] == ["no_call", "no_call"]
    assert all(body["temperature"] == 0 and body["seed"] == 7 for body in seen)
    assert all(body["model"] == "atlas" and "rolloutd_expected" not in body for body in seen)


def test_the_stored_endpoint_has_no_credentials() -> None:
    """Userinfo and query strings are dropped from the endpoint kept with a run."""
    url = "https://ops:s3cret@engine.internal:8443/v1base/?api_key=abc"
    assert public_endpoint(url) == "https://engine.internal:8443/v1base"


def test_a_run_is_stamped_by_the_clock_it_is_given(example_suite: Suite) -> None:
    """The run's start and finish are the given clock's times, decades from the wall clock."""
    past = datetime(1999, 12, 31, 23, 0, tzinfo=UTC)
    times = iter([past, past + timedelta(minutes=5)])

    async def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "no"}}]})

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    run = run_suite(
        suite,
        "http://e",
        options=RunnerOptions(model="m"),
        transport=httpx.MockTransport(answer),
        clock=lambda: next(times),
    )
    assert (run.started_at, run.finished_at) == (past, past + timedelta(minutes=5))


def test_a_withdrawn_permit_abandons_the_run_before_the_next_request(
    example_suite: Suite,
) -> None:
    """The permit is asked before the run and before every request, with the request's
    timeout; once it says no, the run raises and sends nothing more."""
    asked: list[float] = []
    sent = Counter[str]()

    async def answer(request: httpx.Request) -> httpx.Response:
        sent[request.url.path] += 1
        return httpx.Response(200, json={"choices": [{"message": {"content": "no"}}]})

    def permit(timeout_s: float) -> bool:
        asked.append(timeout_s)
        return len(asked) <= 4  # the run's start, then three requests

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:10])
    options = RunnerOptions(model="m", concurrency=1, timeout_s=7.0)
    with pytest.raises(RunAbandoned):
        asyncio.run(
            run_suite_async(
                suite,
                "http://e",
                options=options,
                transport=httpx.MockTransport(answer),
                permit=permit,
            )
        )
    assert sent["/v1/chat/completions"] == 3
    assert set(asked) == {7.0}


def test_a_slowly_dripping_answer_is_cut_at_the_request_timeout(example_suite: Suite) -> None:
    """httpx's timeout bounds each read; the whole request is bounded too, so an answer that
    trickles in byte by byte cannot outlast the timeout a permit was given for."""

    async def trickle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Drip())

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:1])
    options = RunnerOptions(model="m", timeout_s=0.5, retries=0)
    started = time.monotonic()
    run = run_suite(suite, "http://e", options=options, transport=httpx.MockTransport(trickle))
    assert time.monotonic() - started < 5.0
    (case,) = run.cases
    assert case.outcome == "request_error" and "timed out after 0.5s" in (case.error or "")


def test_a_model_list_that_never_finishes_leaves_the_model_out(example_suite: Suite) -> None:
    """``/v1/models`` is only a courtesy: one that hangs past the timeout is given up, and the
    run goes on without naming a model."""
    seen: list[dict[str, object]] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, stream=Drip())
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "no"}}]})

    suite = dataclasses.replace(example_suite, cases=example_suite.cases[:2])
    options = RunnerOptions(timeout_s=0.3, retries=0)
    run = run_suite(suite, "http://e", options=options, transport=httpx.MockTransport(answer))
    assert [case.outcome for case in run.cases] == ["no_call", "no_call"]
    assert all("model" not in body for body in seen)
