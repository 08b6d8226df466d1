"""rolloutctl suite show: a stored evaluation run, its figures and per-field results."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from rolloutd.cli.ctl import main
from rolloutd.evaluation import records
from rolloutd.evaluation.results import RunSummary

if TYPE_CHECKING:
    from conftest import StoreHandle


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_a_stored_run_is_shown_field_by_field_and_as_json(
    store: StoreHandle,
    profile_runs: dict[str, RunSummary],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run `eval` stored is shown with every field's tally, in a table and in JSON."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", store.url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    run = profile_runs["int4-like"]
    with store.sessions.begin() as session:
        run_id = records.store_run(session, run)
    code, out, _ = _run(capsys, "suite", "show", str(run_id))
    assert code == 0
    assert f"run {run_id} (" in out and run.endpoint in out
    for field in run.fields:
        assert field in out
    code, raw, _ = _run(capsys, "suite", "show", str(run_id), "-o", "json")
    shown = json.loads(raw)
    assert code == 0 and shown["run_id"] == run_id
    assert [row["field"] for row in shown["fields"]] == list(run.fields)
    assert shown["cases"] == len(run.cases)


def test_a_run_that_does_not_exist_is_bad_input(
    store: StoreHandle, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown run number is named, exit 2, no traceback."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", store.url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    code, out, err = _run(capsys, "suite", "show", "999")
    assert code == 2 and "there is no evaluation run 999" in err
    assert "Traceback" not in out + err
