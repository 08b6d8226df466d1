"""The gateway's capture: OpenAI Batch lines, a share drawn the same in any thread, redaction
before writing, a size cap, retention, whole lines under concurrency and after a crash, and
a failed write that never reaches the user's request."""

from __future__ import annotations

import copy
import json
import os
import stat
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rolloutd.evaluation.capture import read_capture
from rolloutd.gateway import CAPTURE_KEY, Capture, Redaction, session_digest
from tests.capture.build import SECRET, T0, Clock, answer, body, day_files, lines

DAY = (T0 - timedelta(hours=10), T0 + timedelta(hours=14))


def test_a_captured_request_is_a_batch_input_line_and_its_answer_an_output_line(
    tmp_path: Path,
) -> None:
    """The input line is what vLLM's run-batch reads, the output line what it writes, plus
    rolloutd's key: the pool, the session's sha256 (never the id) and the time."""
    capture = Capture(tmp_path, share=1.0, clock=Clock(T0))
    assert capture.record(body(), answer=answer(), status_code=200, pool="stable", session="s-9")
    requests, responses = day_files(tmp_path)
    (request,) = lines(requests)
    (response,) = lines(responses)
    assert set(request) == {"custom_id", "method", "url", "body"}
    assert (request["method"], request["url"]) == ("POST", "/v1/chat/completions")
    assert request["body"] == body()
    assert set(response) == {"id", "custom_id", "response", "error", CAPTURE_KEY}
    assert response["custom_id"] == request["custom_id"] and response["error"] is None
    assert set(response["response"]) == {"status_code", "request_id", "body"}
    assert response["response"]["status_code"] == 200
    assert response["response"]["body"] == answer()
    assert response[CAPTURE_KEY] == {
        "pool": "stable",
        "session": session_digest("s-9"),
        "at": "2026-12-04T10:00:00Z",
    }
    assert "s-9" not in responses.read_text()
    assert capture.captured == 1


def test_only_tool_calling_requests_are_captured_at_the_share_asked(tmp_path: Path) -> None:
    """No tools (or an empty list), nothing written; at share 0.25 about a quarter of 4,000
    sessionless requests, and of 4,000 sessions."""
    capture = Capture(tmp_path, share=0.25, seed=5, clock=Clock(T0))
    assert not capture.record(body(tools=False), answer=answer(), status_code=200, pool="stable")
    empty = {**body(), "tools": []}
    assert not capture.record(empty, answer=answer(), status_code=200, pool="stable")
    loose = sum(
        capture.record(body(), answer=answer(), status_code=200, pool="canary") for _ in range(4000)
    )
    sessions = sum(
        capture.record(body(), answer=answer(), status_code=200, pool="canary", session=f"s{i}")
        for i in range(4000)
    )
    assert 900 < loose < 1100 and 900 < sessions < 1100
    assert capture.captured == loose + sessions


def _turns(sessions: int, turns: int) -> list[tuple[str, dict[str, Any]]]:
    """Each session's turns, its history growing a message a turn."""
    offered = []
    for s in range(sessions):
        history = [{"role": "system", "content": "agent"}]
        for t in range(turns):
            history = [*history, {"role": "user", "content": f"turn {t} of session {s}"}]
            offered.append((f"sess-{s}", {**body(), "messages": history}))
    return offered


def _captured_turns(directory: Path) -> set[tuple[str, int]]:
    read = read_capture(directory, since=DAY[0], until=DAY[1])
    assert not read.problems
    return {(r.session or "", len(r.request["messages"])) for r in read.records}


def test_with_a_session_the_draw_is_the_same_in_any_thread_and_order(tmp_path: Path) -> None:
    """Two gateways with the same seed capture the same turns, one serving them in order,
    the other from eight threads in reverse; a session's turns are drawn apart (some
    sessions are partly captured), and another seed draws other turns."""
    offered = _turns(sessions=200, turns=6)
    ordered = Capture(tmp_path / "a", share=0.3, seed=7, clock=Clock(T0))
    for session, request in offered:
        ordered.record(request, answer=answer(), status_code=200, pool="stable", session=session)
    threaded = Capture(tmp_path / "b", share=0.3, seed=7, clock=Clock(T0))
    backwards = offered[::-1]

    def serve(part: int) -> None:
        for session, request in backwards[part::8]:
            threaded.record(
                request, answer=answer(), status_code=200, pool="stable", session=session
            )

    workers = [threading.Thread(target=serve, args=(part,)) for part in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    other = Capture(tmp_path / "c", share=0.3, seed=8, clock=Clock(T0))
    for session, request in offered:
        other.record(request, answer=answer(), status_code=200, pool="stable", session=session)
    first = _captured_turns(tmp_path / "a")
    assert first == _captured_turns(tmp_path / "b") != _captured_turns(tmp_path / "c")
    assert 0.2 < len(first) / len(offered) < 0.4
    per_session: dict[str, int] = {}
    for session, _ in first:
        per_session[session] = per_session.get(session, 0) + 1
    assert any(0 < n < 6 for n in per_session.values())


def test_redaction_drops_and_hashes_what_it_names_and_nothing_else(tmp_path: Path) -> None:
    """The named fields are gone or hashed before anything is written, the secret is in
    neither file, and every other field is as the gateway sent it."""
    rules = [
        "drop:request.metadata.user_id",
        "hash:request.messages[1].content",
        "drop:response.choices[*].message.tool_calls[*].id",
    ]
    capture = Capture(tmp_path, share=1.0, redact=rules, clock=Clock(T0))
    sent, replied = body(SECRET), answer()
    original = copy.deepcopy((sent, replied))
    capture.record(sent, answer=replied, status_code=200, pool="stable")
    assert (sent, replied) == original  # the gateway's own objects are untouched
    requests, responses = day_files(tmp_path)
    assert all(SECRET not in p.read_text() and "u-17" not in p.read_text() for p in (requests,))
    assert "call_1" not in responses.read_text()
    (request,) = lines(requests)
    (response,) = lines(responses)
    hashed = request["body"]["messages"][1]["content"]
    assert hashed.startswith("sha256:") and len(hashed) == 7 + 64
    expected = body(SECRET)
    expected["metadata"] = {}
    expected["messages"][1]["content"] = hashed
    assert request["body"] == expected
    expected_answer = answer()
    del expected_answer["choices"][0]["message"]["tool_calls"][0]["id"]
    assert response["response"]["body"] == expected_answer
    # Equal values hash equal: the sample's dedupe still works on hashed content.
    capture.record(body(SECRET), answer=answer(), status_code=200, pool="stable")
    assert lines(requests)[1]["body"]["messages"][1]["content"] == hashed


def test_a_redaction_rule_on_every_list_item_and_on_the_answer() -> None:
    """``[*]`` reaches every item, ``[N]`` one, and a path that is not there changes nothing."""
    rule = Redaction.parse("drop:response.choices[*].message.tool_calls")
    redacted = rule.apply(answer())
    assert redacted == {"choices": [{"message": {"role": "assistant"}}]}
    every = Redaction.parse("hash:request.messages[*].content").apply(body("x"))
    assert all(m["content"].startswith("sha256:") for m in every["messages"])
    assert Redaction.parse("drop:request.messages[*]").apply(body())["messages"] == []
    assert Redaction.parse("drop:request.messages[0]").apply(body("x"))["messages"] == [
        {"role": "user", "content": "x"}
    ]
    # A path that is not there, or runs through something else, leaves the body alone.
    for absent in ("drop:request.nope.deeper", "hash:request.model[*]", "drop:request.tools[9]"):
        assert Redaction.parse(absent).apply(body()) == body()


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ("erase:request.x", "expected 'drop:' or 'hash:'"),
        ("drop:messages", "starts with 'request.' or 'response.'"),
        ("drop:request.", "starts with 'request.' or 'response.'"),
        ("hash:request.a..b", "bad path segment ''"),
        ("hash:request.a[x]", "bad path segment 'a[x]'"),
        ("hash:request.a[*", "bad path segment 'a[*'"),
    ],
)
def test_a_bad_redaction_rule_is_refused_naming_it(tmp_path: Path, rule: str, says: str) -> None:
    """Refused when the capture is made, before the directory is created."""
    with pytest.raises(ValueError, match="redaction rule") as info:
        Capture(tmp_path / "never", redact=["drop:request.metadata", rule])
    assert says in str(info.value) and rule in str(info.value)
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"share": 1.5}, "share must lie between 0 and 1"),
        ({"max_bytes_per_day": 0}, "max_bytes_per_day must be positive"),
        ({"retention": 0}, "retention must be at least one day"),
        ({"retention": timedelta(hours=12)}, "retention must be at least one day"),
    ],
)
def test_a_bad_setting_is_refused(tmp_path: Path, options: dict[str, Any], says: str) -> None:
    """A share outside 0-1, a cap of nothing or a retention under a day is refused
    when the capture is made."""
    with pytest.raises(ValueError, match=says):
        Capture(tmp_path, **options)


def test_past_the_days_size_cap_the_day_is_full_and_requests_are_counted(
    tmp_path: Path,
) -> None:
    """Once a request would pass the cap, it and the day's further ones (even small ones)
    are counted, not written; the next day starts empty."""
    clock = Clock(T0)
    capture = Capture(tmp_path, share=1.0, max_bytes_per_day=5_000, clock=clock)
    written = sum(
        capture.record(body(), answer=answer(), status_code=200, pool="stable") for _ in range(20)
    )
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert 0 < written < 20 and size <= 5_000
    assert capture.skipped_over_cap == 20 - written
    tiny = {"messages": [], "tools": [{}]}
    assert not capture.record(tiny, answer=None, status_code=200, pool="stable")
    assert capture.skipped_over_cap == 20 - written + 1
    clock.now = T0 + timedelta(days=1)
    assert capture.record(body(), answer=answer(), status_code=200, pool="stable")


def test_a_restarted_gateway_counts_what_the_day_already_holds(tmp_path: Path) -> None:
    """The cap counts the bytes already in today's files, not only this process's writes."""
    first = Capture(tmp_path, share=1.0, max_bytes_per_day=5_000, clock=Clock(T0))
    while first.record(body(), answer=answer(), status_code=200, pool="stable"):
        pass
    first.close()
    again = Capture(tmp_path, share=1.0, max_bytes_per_day=5_000, clock=Clock(T0))
    assert not again.record(body(), answer=answer(), status_code=200, pool="stable")
    assert again.skipped_over_cap == 1


def _day_file(directory: Path, day: str) -> Path:
    path = directory / f"{day}.requests.jsonl"
    path.write_text("{}\n")
    return path


def test_days_past_retention_are_deleted_when_the_capture_starts(tmp_path: Path) -> None:
    """Seven days by default: on the 4th of December the 26th of November goes, the 27th
    (seven days old) stays; files not named as day files are never touched."""
    old = _day_file(tmp_path, "2026-11-26")
    kept = _day_file(tmp_path, "2026-11-27")
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("x\n")
    not_a_day = _day_file(tmp_path, "2026-13-45")
    Capture(tmp_path, share=1.0, clock=Clock(T0))
    assert not old.exists() and kept.exists() and unrelated.exists() and not_a_day.exists()


def test_days_past_retention_are_deleted_at_each_new_day(tmp_path: Path) -> None:
    """With a retention of two days, a day's files go when the fourth day starts."""
    clock = Clock(T0)
    capture = Capture(tmp_path, share=1.0, retention=2, clock=clock)
    capture.record(body(), answer=answer(), status_code=200, pool="stable")
    requests, responses = day_files(tmp_path)
    clock.now = T0 + timedelta(days=2)
    capture.record(body(), answer=answer(), status_code=200, pool="stable")
    assert requests.exists() and responses.exists()
    clock.now = T0 + timedelta(days=3)
    capture.record(body(), answer=answer(), status_code=200, pool="stable")
    assert not requests.exists() and not responses.exists()
    assert (
        sorted(p.name[:10] for p in tmp_path.iterdir()) == ["2026-12-06"] * 2 + ["2026-12-07"] * 2
    )


def test_concurrent_requests_are_written_as_whole_lines_joined_by_custom_id(
    tmp_path: Path,
) -> None:
    """Eight threads' requests of many sizes all read back, none torn or interleaved."""
    capture = Capture(tmp_path, share=1.0, clock=Clock(T0))

    def serve(worker: int) -> None:
        for i in range(150):
            request = body(f"worker {worker} request {i} " + "x" * (i * 37))
            capture.record(
                request, answer=answer(f"O{i}"), status_code=200, pool="stable", session=f"w{i}"
            )

    workers = [threading.Thread(target=serve, args=(w,)) for w in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    read = read_capture(tmp_path, since=DAY[0], until=DAY[1])
    assert capture.captured == len(read.records) == 1200 and not read.problems


def test_a_line_a_crash_cut_off_is_ended_so_the_next_line_is_whole(tmp_path: Path) -> None:
    """After a restart the cut line is the only one lost: the next write starts a line."""
    first = Capture(tmp_path, share=1.0, clock=Clock(T0))
    first.record(body(), answer=answer(), status_code=200, pool="stable")
    first.close()
    responses = day_files(tmp_path)[1]
    with responses.open("a") as handle:  # what a crash mid-write leaves
        handle.write('{"id": "batch_req_x", "custom_id": "req-x", "resp')
    again = Capture(tmp_path, share=1.0, clock=Clock(T0 + timedelta(minutes=1)))
    again.record(body(), answer=answer(), status_code=200, pool="stable")
    read = read_capture(tmp_path, since=DAY[0], until=DAY[1])
    assert len(read.records) == 2
    assert [str(p) for p in read.problems] == [
        f"{responses}:2: not a JSON object",
    ]


def test_a_write_that_fails_loses_the_request_never_the_users_answer(tmp_path: Path) -> None:
    """A day file that cannot be opened (here a directory in its place) counts the request
    as failed and returns; the next day captures again."""
    clock = Clock(T0)
    capture = Capture(tmp_path, share=1.0, clock=clock)
    day_files(tmp_path)[1].mkdir()
    assert not capture.record(body(), answer=answer(), status_code=200, pool="stable")
    assert (capture.failed, capture.captured) == (1, 0)
    clock.now = T0 + timedelta(days=1)
    assert capture.record(body(), answer=answer(), status_code=200, pool="stable")


def test_the_files_are_for_the_gateways_group_only(tmp_path: Path) -> None:
    """Day files are 0640 and the directory 0750, whatever a permissive umask allows."""
    old = os.umask(0o022)
    try:
        capture = Capture(tmp_path / "capture", share=1.0, clock=Clock(T0))
        capture.record(body(), answer=answer(), status_code=200, pool="stable")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "capture").stat().st_mode) == 0o750
    for path in day_files(tmp_path / "capture"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_text_that_is_no_utf_8_is_written_escaped_as_valid_json(tmp_path: Path) -> None:
    """JSON allows a lone surrogate ("\\ud800") that UTF-8 cannot hold."""
    capture = Capture(tmp_path, share=1.0, clock=Clock(T0))
    odd = body(json.loads('"half a pair \\ud800"'))
    assert capture.record(odd, answer=answer(), status_code=200, pool="stable")
    (request,) = lines(day_files(tmp_path)[0])
    assert request["body"] == odd
