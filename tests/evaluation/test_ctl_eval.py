"""Tests of ``rolloutctl eval``: bad input refused before any request, runs printed and stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from sqlalchemy import func, select

from rolloutd.cli.ctl import main
from rolloutd.cli.evaluation import MAX_REQUEST_ERRORS
from rolloutd.core.plan import SuiteGate
from rolloutd.evaluation.suite import load_suite
from rolloutd.sim.engine import Replica
from rolloutd.store.db import make_engine, session_factory, upgrade
from rolloutd.store.suite_models import SuiteFieldResult, SuiteRun
from tests.evaluation.conftest import EXAMPLE, closed_port, engine, start


@pytest.fixture
def replica() -> Iterator[Replica]:
    """An exact simulated replica."""
    started = start("exact")
    yield started
    started.stop()


def _small_suite(tmp_path: Path, lines: int = 20) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:lines]))
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def test_a_bad_suite_is_refused_before_any_request(
    tmp_path: Path, replica: Replica, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with file:line and field; the endpoint never sees a request."""
    suite = _small_suite(tmp_path, 3)
    suite.write_text(suite.read_text() + '{"id": "x", "messages": []}\n')
    before = replica.ledger.position()
    code, out, err = _run(["eval", str(suite), "--endpoint", replica.url, "--no-store"], capsys)
    assert code == 2
    assert f"{suite}:4: messages: required" in err
    assert "Traceback" not in err and out == ""
    assert replica.ledger.position() == before


def test_an_endpoint_that_is_not_a_url_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The option is named in the message."""
    code, _, err = _run(["eval", str(_small_suite(tmp_path)), "--endpoint", "engine:8000"], capsys)
    assert code == 2
    assert "--endpoint: expected an http:// or https:// URL" in err


def test_eval_prints_both_scores_and_the_paired_comparison_and_exits_3_on_a_drop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Canary int4-like against an exact baseline: strict below schema-aware, pairs counted,
    and the max-drop rule fires: exit 3."""
    canary, baseline = start("int4-like"), start("exact")
    try:
        argv = [
            "eval",
            str(EXAMPLE),
            "--endpoint",
            canary.url,
            "--baseline-endpoint",
            baseline.url,
            "--concurrency",
            "16",
            "--send-expected",
            "--no-store",
            "--output",
            "json",
        ]
        code, out, _ = _run(argv, capsys)
    finally:
        canary.stop()
        baseline.stop()
    data = json.loads(out)
    assert data["canary"]["strict_exactness"] < data["canary"]["exactness"] < 1.0
    assert data["baseline"]["exactness"] == 1.0
    calls = data["comparison"]["calls"]
    assert calls["pairs"] == 300 and calls["canary_better"] == 0 and calls["canary_worse"] > 20
    assert data["comparison"]["max_drop"]["fires"] is True
    # The drop fired, so the check failed, and the report says why.
    assert code == 3
    assert [failure.split(":")[0] for failure in data["failures"]] == [
        "max_drop",
        "no_regression",
    ]
    assert data["failures"][0].startswith("max_drop: exactness dropped ")


def test_eval_stores_the_run_and_hides_credentials(
    tmp_path: Path,
    replica: Replica,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The run lands in the configured database; the stored endpoint has no password."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", url)
    endpoint = replica.url.replace("http://", "http://ops:hunter22@")
    code, out, err = _run(
        ["eval", str(_small_suite(tmp_path)), "--endpoint", endpoint, "--send-expected"], capsys
    )
    assert code == 0, err
    assert "hunter22" not in out + err
    assert "schema-aware 100.00%  strict 100.00%" in out
    engine = make_engine(url)
    with session_factory(engine)() as session:
        row = session.scalars(select(SuiteRun)).one()
        fields = session.scalar(select(func.count()).select_from(SuiteFieldResult))
    engine.dispose()
    assert (row.cases, row.exact, row.role) == (20, 20, "canary")
    assert "hunter22" not in row.endpoint and row.endpoint == replica.url
    expected = load_suite(tmp_path / "small.jsonl")
    assert fields == sum(len(case.expected_arguments) for case in expected.cases)


def test_eval_exits_3_when_no_case_is_answered_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 of 20 answered is a failed check, not a report to read: exit 3, the JSON report
    keeps its shape and its "failures" name the run and the count."""
    url = f"http://127.0.0.1:{closed_port()}"
    argv = ["eval", str(_small_suite(tmp_path)), "--endpoint", url, "--no-store"]
    argv += ["--model", "m", "--retries", "0", "--output", "json"]
    code, out, err = _run(argv, capsys)
    assert code == 3, err
    data = json.loads(out)
    assert sorted(data) == ["canary", "failures"]
    assert data["canary"]["measured"] == 0 and data["canary"]["outcomes"]["request_error"] == 20
    assert data["failures"] == [
        "canary: 20 of 20 cases got no answer (request errors), more than "
        "--max-request-errors 5% allows"
    ]


@pytest.mark.parametrize(
    ("failing", "extra", "expected"),
    [(1, [], 0), (2, [], 3), (2, ["--max-request-errors", "0.1"], 0)],
    ids=["1-of-20-at-5pct", "2-of-20-at-5pct", "2-of-20-at-10pct"],
)
def test_the_request_error_limit_fails_the_check_only_when_exceeded(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failing: int,
    extra: list[str],
    expected: int,
) -> None:
    """More than --max-request-errors of the cases unanswered fails; exactly that many does
    not."""
    answered = 0

    async def answer(request: web.Request) -> web.Response:
        nonlocal answered
        answered += 1
        if answered <= failing:
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        return web.json_response({"choices": [{"message": {"content": "no call"}}]})

    with engine(answer) as url:
        argv = ["eval", str(_small_suite(tmp_path)), "--endpoint", url, "--no-store"]
        argv += ["--model", "m", "--concurrency", "1", *extra]
        code, out, err = _run(argv, capsys)
    assert code == expected, out + err
    assert ("failed: canary: " in out) == (expected == 3)
    # No case was exact ("no call"): alone, a pass says what it did and did not judge.
    passed = "passed: the cases were answered (exactness is judged only against a baseline"
    assert (passed in out) == (expected == 0)


def test_eval_passes_when_the_canary_matches_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two exact builds: no rule fires, exit 0, no failures."""
    canary, baseline = start("exact"), start("exact", pool="stable")
    try:
        argv = ["eval", str(_small_suite(tmp_path)), "--endpoint", canary.url]
        argv += ["--baseline-endpoint", baseline.url, "--send-expected", "--no-store", "-o", "json"]
        code, out, err = _run(argv, capsys)
    finally:
        canary.stop()
        baseline.stop()
    assert code == 0, err
    data = json.loads(out)
    assert data["failures"] == [] and data["comparison"]["max_drop"]["fires"] is False


def test_eval_tolerates_the_share_of_request_errors_a_suite_gate_does() -> None:
    """The default --max-request-errors is a suite gate's default max_request_errors."""
    assert SuiteGate.model_fields["max_request_errors"].default == MAX_REQUEST_ERRORS


def test_eval_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """Scripts can read what each exit code means, 3 included."""
    code, out, _ = _run(["eval", "--help"], capsys)
    assert code == 0
    assert "Exit codes:" in out
    assert "3  the check failed" in out and "--max-request-errors" in out


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "-1"),
        ("--timeout", "1e308"),
        ("--max-request-errors", "nan"),
        ("--max-request-errors", "1.5"),
    ],
)
def test_float_options_must_be_finite_and_in_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """nan, inf and numbers out of range are bad input naming the option; nothing is sent."""
    url = f"http://127.0.0.1:{closed_port()}"
    argv = ["eval", str(_small_suite(tmp_path)), "--endpoint", url, "--no-store", option, value]
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert f"Error: Invalid value for '{option}': " in err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:99999", "not a valid URL (Port out of range 0-65535)"),
        ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("http://engine:port", "not a valid URL (Port could not be cast"),
        ("ftp://x", "expected an http:// or https:// URL"),
        ("not a url", "expected an http:// or https:// URL"),
        ("http://", "the URL names no host"),
        ("http://engine :8000", "expected a URL without spaces"),
        ("http://engine:0", "port 0 cannot be connected to"),
    ],
)
@pytest.mark.parametrize("option", ["--endpoint", "--baseline-endpoint"])
def test_a_malformed_endpoint_is_bad_input_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, url: str, reason: str
) -> None:
    """Exit 2 with the option and what is wrong, never an internal error."""
    good = f"http://127.0.0.1:{closed_port()}"
    endpoints = {"--endpoint": good, "--baseline-endpoint": good, option: url}
    argv = ["eval", str(_small_suite(tmp_path)), "--no-store"]
    argv += [part for pair in endpoints.items() for part in pair]
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert err.startswith(f"rolloutctl: {option}: {reason}")
    assert err.count("\n") == 1 and out == ""


def test_a_deeply_nested_suite_is_refused_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line of 100,000 '[' is bad input on its line, not a RecursionError."""
    suite = _small_suite(tmp_path, 2)
    suite.write_text(suite.read_text() + "[" * 100_000 + "\n")
    url = f"http://127.0.0.1:{closed_port()}"
    code, out, err = _run(["eval", str(suite), "--endpoint", url, "--no-store"], capsys)
    assert (code, out) == (2, "")
    assert err == f"rolloutctl: {suite}:3: nests lists and objects deeper than 64 levels\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the suite has no cases"),
        (bytes(range(256)), "not UTF-8 text"),
        (None, "cannot read the suite: No such file or directory"),
    ],
    ids=["empty", "binary", "missing"],
)
def test_an_unreadable_suite_is_bad_input_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    """An empty, binary or missing suite: exit 2, one line naming the file."""
    suite = tmp_path / "suite.jsonl"
    if content is not None:
        suite.write_bytes(content)
    url = f"http://127.0.0.1:{closed_port()}"
    code, out, err = _run(["eval", str(suite), "--endpoint", url, "--no-store"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"rolloutctl: {suite}: {message}") and err.count("\n") == 1


def test_an_answer_larger_than_max_answer_bytes_is_a_request_error(
    tmp_path: Path, replica: Replica, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-answer-bytes bounds every answer: a limit below the engine's answers makes every
    case a request error, and the check fails."""
    argv = ["eval", str(_small_suite(tmp_path, 3)), "--endpoint", replica.url, "--no-store"]
    argv += ["--send-expected", "--max-answer-bytes", "64", "-o", "json"]
    code, out, err = _run(argv, capsys)
    assert code == 3, err
    data = json.loads(out)
    assert data["canary"]["outcomes"]["request_error"] == 3
    assert data["failures"][0].startswith("canary: 3 of 3 cases got no answer")
