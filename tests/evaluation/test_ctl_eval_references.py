"""``rolloutctl eval`` and ``rolloutctl suite show`` on a suite of reference answers: scores
per case and their mean printed, runs stored, the paired check against a baseline."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from rolloutd.cli.ctl import main
from tests.evaluation.conftest import engine, start
from tests.evaluation.test_reference_gate import RAG, FaithfulnessJudge

if TYPE_CHECKING:
    from conftest import StoreHandle


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


@pytest.fixture
def database(store: StoreHandle, monkeypatch: pytest.MonkeyPatch) -> StoreHandle:
    """``store`` as rolloutctl's database."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", store.url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    return store


def test_eval_scores_a_reference_suite_stores_it_and_suite_show_prints_the_scores(
    database: StoreHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    """token-F1 per case and the mean; against a faithful baseline an unfaithful canary
    fails the paired check (exit 3); suite show prints each case's score from the store."""
    stable, canary = start("exact", pool="stable"), start("exact")
    try:
        canary.set_faults(unfaithful_rate=0.5)
        argv = ["eval", str(RAG), "--endpoint", canary.url, "--send-expected"]
        code, out, _ = _run([*argv, "--scorer", "token_f1"], capsys)
        assert code == 0, out
        assert "scorer token_f1  mean score" in out and "support-" in out
        code, raw, _ = _run(
            [*argv, "--baseline-endpoint", stable.url, "--scorer", "token_f1", "-o", "json"],
            capsys,
        )
    finally:
        stable.stop()
        canary.stop()
    report = json.loads(raw)
    assert code == 3 and report["failures"][0].startswith("no_regression: token_f1 score")
    assert report["baseline"]["mean_score"] == 1.0 > report["canary"]["mean_score"]
    run_id = report["canary"]["run_id"]
    code, out, _ = _run(["suite", "show", str(run_id)], capsys)
    assert code == 0 and f"run {run_id} (canary)" in out and "scorer token_f1" in out
    code, raw, _ = _run(["suite", "show", str(run_id), "-o", "json"], capsys)
    shown = json.loads(raw)
    assert [row["score"] for row in shown["results"]] == [
        row["score"] for row in report["canary"]["results"]
    ]


def test_eval_with_a_judge_shows_judge_errors_and_refuses_a_missing_key(
    database: StoreHandle, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge that fails some answers: they are judge errors in eval's report and in suite
    show; a judge key variable that is unset is bad input before any request."""
    server = FaithfulnessJudge(failing=("Leeds store open on",))
    replica = start("exact")
    try:
        with engine(server.handle) as url:
            judge = ["--scorer", "judge", "--judge-url", url, "--judge-model", "m"]
            argv = ["eval", str(RAG), "--endpoint", replica.url, "--send-expected", *judge]
            monkeypatch.delenv("JUDGE_KEY", raising=False)
            code, _, err = _run([*argv, "--judge-key-env", "JUDGE_KEY"], capsys)
            assert code == 2 and "JUDGE_KEY (the judge's API key) is not set" in err
            assert replica.ledger.position() == 0
            code, raw, _ = _run([*argv, "-o", "json"], capsys)
    finally:
        replica.stop()
    report = json.loads(raw)
    assert report["canary"]["judge_errors"] == 1
    assert code == 0  # 1 of 26 is within the judge's 5% bound
    run_id = report["canary"]["run_id"]
    code, out, _ = _run(["suite", "show", str(run_id)], capsys)
    assert code == 0 and "judge error: judge answered HTTP 500" in out
