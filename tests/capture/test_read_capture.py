"""Reading a capture back: the stretch asked for, Batch lines without rolloutd's key kept by
their file's day, failed requests as answers without a status, and every bad line reported
with its file, line and field (never its content) and skipped."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rolloutd.evaluation import capture as reader
from rolloutd.evaluation.capture import read_capture
from rolloutd.gateway import Capture
from tests.capture.build import SECRET, T0, Clock, answer, body, day_files

MIDNIGHT = T0.replace(hour=0)


def _batch(directory: Path, day: str, inputs: list[Any], outputs: list[Any]) -> tuple[Path, Path]:
    """A day of plain OpenAI Batch files, as written by hand or by another tool."""
    directory.mkdir(exist_ok=True)
    requests, responses = day_files(directory, day)
    requests.write_text("".join(json.dumps(x) + "\n" for x in inputs))
    responses.write_text("".join(json.dumps(x) + "\n" for x in outputs))
    return requests, responses


def _input(custom_id: str, text: str = "refund") -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": body(text),
    }


def _output(custom_id: str, response: Any = None, **extra: Any) -> dict[str, Any]:
    if response is None and "error" not in extra:
        response = {"status_code": 200, "request_id": f"r-{custom_id}", "body": answer()}
    return {
        "id": f"batch_req_{custom_id}",
        "custom_id": custom_id,
        "response": response,
        "error": None,
        **extra,
    }


def test_reading_back_keeps_the_stretch_and_reports_bad_lines_by_file_and_line(
    tmp_path: Path,
) -> None:
    """A corrupt line, an answer without its request, and a last line cut off mid-write are
    each reported with file and line (never their content) and skipped; the rest is kept."""
    clock = Clock(T0)
    capture = Capture(tmp_path, share=1.0, clock=clock)
    for minute in range(5):
        clock.now = T0 + timedelta(minutes=minute)
        capture.record(body(SECRET), answer=answer(), status_code=200, pool="stable")
    requests, responses = day_files(tmp_path)
    with requests.open("a") as handle:
        handle.write('{"custom_id": 7, "body": {}}\n')
    with responses.open("a") as handle:
        handle.write('{"custom_id": "nobody", "response": {}}\n')
        handle.write(f'{{"custom_id": "x", "response": {{"body": "{SECRET}')
    read = read_capture(tmp_path, since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=4))
    assert len(read.records) == 3  # minutes 1, 2, 3
    assert all(
        r.pool == "stable" and r.request["messages"][1]["content"] == SECRET for r in read.records
    )
    assert read.records[0].where == f"{requests}:2"
    assert read.files == (str(requests), str(responses))
    problems = [str(p) for p in read.problems]
    assert problems == [
        f"{requests}:6: custom_id: missing or not a string",
        f"{responses}:6: custom_id: no request line with this custom_id",
        f"{responses}:7: not a JSON object (cut off: the file ends mid-line)",
    ]
    assert not any(SECRET in p for p in problems)


def test_lines_without_rolloutds_key_count_for_their_files_day_only(tmp_path: Path) -> None:
    """A hand-written day has no times: a stretch ending at midnight reads that day's files,
    never the next day's, and the record has no pool, session or time."""
    _batch(tmp_path, "2026-12-04", [_input("a")], [_output("a")])
    _batch(tmp_path, "2026-12-05", [_input("b")], [_output("b")])
    day = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert [r.custom_id for r in day.records] == ["a"]
    (record,) = day.records
    assert (record.pool, record.session, record.at, record.status_code) == (None, None, None, 200)
    both = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1, seconds=1))
    assert [r.custom_id for r in both.records] == ["a", "b"]
    naive = read_capture(
        tmp_path, since=MIDNIGHT.replace(tzinfo=None), until=MIDNIGHT.replace(tzinfo=None, hour=6)
    )
    assert [r.custom_id for r in naive.records] == ["a"]


def test_a_failed_request_reads_as_an_answer_without_a_status(tmp_path: Path) -> None:
    """The Batch API writes "response": null and an error; vLLM's run-batch a 400 without a
    body: neither is a corrupt line."""
    _batch(
        tmp_path,
        "2026-12-04",
        [_input("api"), _input("vllm")],
        [
            _output("api", error={"code": "batch_expired", "message": "expired"}),
            _output("vllm", {"status_code": 400, "request_id": "r"}, error="bad request"),
        ],
    )
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert not read.problems
    assert [(r.status_code, r.answer) for r in read.records] == [(None, None), (400, None)]


def test_missing_keys_are_reported_with_their_field(tmp_path: Path) -> None:
    """Each line missing what the Batch format requires is one problem naming the key;
    the rest joins."""
    requests, responses = _batch(
        tmp_path,
        "2026-12-04",
        [_input("a"), _input("b"), _input("c"), {"custom_id": "d"}, _input("a")],
        [
            {"id": "1", "custom_id": "a"},
            _output("b", {"request_id": "r", "body": answer()}),
            _output("c", {"status_code": 200, "body": {}}, rolloutd={"at": "yesterday"}),
            _output("c"),
            _output("c"),
        ],
    )
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert [str(p) for p in read.problems] == [
        f"{requests}:4: body: missing or not an object",
        f"{requests}:5: custom_id: seen before in this file",
        f"{responses}:1: response: missing",
        f"{responses}:2: response.status_code: missing or not a whole number",
        f"{responses}:3: rolloutd.at: not an ISO 8601 time",
        f"{responses}:5: custom_id: answered twice",
        f"{requests}:1: custom_id: no answer line (cut off?)",
        f"{requests}:2: custom_id: no answer line (cut off?)",
    ]
    assert [r.custom_id for r in read.records] == ["c"]


def test_answers_without_their_requests_file_are_reported(tmp_path: Path) -> None:
    """An answers file alone says the requests are missing, and each answer that it has none."""
    requests, responses = _batch(tmp_path, "2026-12-04", [], [_output("a")])
    requests.unlink()
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert [str(p) for p in read.problems] == [
        f"{requests}: missing: the answers have no requests",
        f"{responses}:1: custom_id: no request line with this custom_id",
    ]


def test_absurd_lines_and_files_are_refused_clearly_and_the_rest_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line over the line bound, one nested past what a parser follows, and a number of
    thousands of digits are each one problem; a file over the file bound is not read."""
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 2_000)
    requests, responses = _batch(
        tmp_path, "2026-12-04", [_input("a"), _input("b", "x" * 5_000)], [_output("a")]
    )
    with requests.open("a") as handle:
        handle.write("[" * 100_000 + "\n")
        handle.write('{"custom_id": ' + "9" * 5_000 + "}\n")
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert [r.custom_id for r in read.records] == ["a"]
    assert [str(p) for p in read.problems] == [
        f"{requests}:2: longer than 2000 bytes",
        f"{requests}:3: longer than 2000 bytes",
        f"{requests}:4: longer than 2000 bytes",
    ]
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 200_000)
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert [str(p) for p in read.problems] == [
        f"{requests}:3: nested too deeply to read",
        f"{requests}:4: not a JSON object",
        f"{requests}:2: custom_id: no answer line (cut off?)",
    ]
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 100)
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    size = responses.stat().st_size
    assert f"{responses}: is {size} bytes, more than 100; not read" in [
        str(p) for p in read.problems
    ]


def test_a_fifo_in_place_of_a_day_file_is_reported_not_waited_on(tmp_path: Path) -> None:
    """A FIFO named like a day file would block a read for ever: it is reported instead."""
    _, responses = _batch(tmp_path, "2026-12-04", [_input("a")], [_output("a")])
    responses.unlink()
    os.mkfifo(responses)
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert f"{responses}: not a regular file; not read" in [str(p) for p in read.problems]


def test_past_a_thousand_problems_they_are_counted_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of garbage keeps the first problems and counts the rest."""
    monkeypatch.setattr(reader, "MAX_PROBLEMS", 5)
    requests, _ = _batch(tmp_path, "2026-12-04", [], [])
    requests.write_text("garbage\n" * 12)
    read = read_capture(tmp_path, since=MIDNIGHT, until=MIDNIGHT + timedelta(days=1))
    assert (len(read.problems), read.unreported, read.problem_count) == (5, 7, 12)


def test_a_stretch_of_centuries_lists_the_directory_once(tmp_path: Path) -> None:
    """The days read are the files listed, not every day of the stretch probed."""
    _batch(tmp_path, "2026-12-04", [_input("a")], [_output("a")])
    (tmp_path / "2026-13-45.requests.jsonl").write_text("not a day\n")
    since, until = MIDNIGHT.replace(year=1), MIDNIGHT.replace(year=9999)
    assert [r.custom_id for r in read_capture(tmp_path, since=since, until=until).records] == ["a"]
