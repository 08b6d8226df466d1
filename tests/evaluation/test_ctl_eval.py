"""Tests of ``rolloutctl eval``: bad input refused before any request, runs printed and stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from rolloutd.cli.ctl import main
from rolloutd.evaluation.suite import load_suite
from rolloutd.sim.engine import Replica
from rolloutd.store.db import make_engine, session_factory, upgrade
from rolloutd.store.suite_models import SuiteFieldResult, SuiteRun
from tests.evaluation.conftest import EXAMPLE, start


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
    before = replica.ledger.position
    code, out, err = _run(["eval", str(suite), "--endpoint", replica.url, "--no-store"], capsys)
    assert code == 2
    assert f"{suite}:4: messages: required" in err
    assert "Traceback" not in err and out == ""
    assert replica.ledger.position == before


def test_an_endpoint_that_is_not_a_url_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The option is named in the message."""
    code, _, err = _run(["eval", str(_small_suite(tmp_path)), "--endpoint", "engine:8000"], capsys)
    assert code == 2
    assert "--endpoint: expected an http:// or https:// URL" in err


def test_eval_prints_both_scores_and_the_paired_comparison_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Canary int4-like against an exact baseline: strict below schema-aware, pairs counted."""
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
    assert code == 0
    data = json.loads(out)
    assert data["canary"]["strict_exactness"] < data["canary"]["exactness"] < 1.0
    assert data["baseline"]["exactness"] == 1.0
    calls = data["comparison"]["calls"]
    assert calls["pairs"] == 300 and calls["canary_better"] == 0 and calls["canary_worse"] > 20
    assert data["comparison"]["max_drop"]["fires"] is True


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
