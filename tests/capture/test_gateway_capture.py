"""The gateway's capture: OpenAI Batch lines, redaction before writing, a size cap, retention;
and reading it back, a bad line reported with its file and line and skipped."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rolloutd.evaluation.capture import read_capture
from rolloutd.gateway import CAPTURE_KEY, Capture, Redaction, session_digest

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
SECRET = "card 4111-1111-1111-1111 for Jane Roe"


def body(text: str = "refund order ORD-1", tools: bool = True) -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": "atlas-70b",
        "messages": [{"role": "system", "content": "agent"}, {"role": "user", "content": text}],
        "metadata": {"user_id": "u-17"},
    }
    if tools:
        request["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "issue_refund",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                },
            }
        ]
    return request


def answer(order: str = "ORD-1", name: str = "issue_refund") -> dict[str, Any]:
    call = {
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"order_id": order})},
    }
    return {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_captured_request_is_a_batch_input_line_and_its_answer_an_output_line(
    tmp_path: Path,
) -> None:
    """The input line is what vLLM's run-batch reads, the output line what it writes, plus
    rolloutd's key: the pool, the session's sha256 (never the id) and the time."""
    capture = Capture(tmp_path, share=1.0, clock=Clock(T0))
    assert capture.record(body(), answer=answer(), status_code=200, pool="stable", session="s-9")
    (request,) = lines(tmp_path / "2026-12-04.requests.jsonl")
    (response,) = lines(tmp_path / "2026-12-04.responses.jsonl")
    assert set(request) == {"custom_id", "method", "url", "body"}
    assert (request["method"], request["url"]) == ("POST", "/v1/chat/completions")
    assert request["body"] == body()
    assert set(response) == {"id", "custom_id", "response", "error", CAPTURE_KEY}
    assert response["custom_id"] == request["custom_id"]
    assert response["response"]["status_code"] == 200
    assert response["response"]["body"] == answer()
    assert response[CAPTURE_KEY] == {
        "pool": "stable",
        "session": session_digest("s-9"),
        "at": "2026-12-04T10:00:00Z",
    }
    assert "s-9" not in (tmp_path / "2026-12-04.responses.jsonl").read_text()


def test_only_tool_calling_requests_are_captured_at_the_share_asked(tmp_path: Path) -> None:
    """No tools, nothing written; at share 0.25 about a quarter of 4,000 (seeded)."""
    capture = Capture(tmp_path, share=0.25, seed=5, clock=Clock(T0))
    assert not capture.record(body(tools=False), answer=answer(), status_code=200, pool="stable")
    taken = sum(
        capture.record(body(), answer=answer(), status_code=200, pool="canary") for _ in range(4000)
    )
    assert 900 < taken < 1100
    assert capture.captured == taken


def test_redaction_drops_and_hashes_what_it_names_before_anything_is_written(
    tmp_path: Path,
) -> None:
    rules = ["drop:request.metadata", "hash:request.messages[1].content"]
    capture = Capture(tmp_path, share=1.0, redact=rules, clock=Clock(T0))
    capture.record(body(SECRET), answer=answer(), status_code=200, pool="stable")
    text = (tmp_path / "2026-12-04.requests.jsonl").read_text()
    assert SECRET not in text and "u-17" not in text
    (request,) = lines(tmp_path / "2026-12-04.requests.jsonl")
    assert "metadata" not in request["body"]
    hashed = request["body"]["messages"][1]["content"]
    assert hashed.startswith("sha256:") and len(hashed) == 7 + 64
    assert request["body"]["messages"][0]["content"] == "agent"  # not named: untouched
    assert request["body"]["tools"] == body()["tools"]


def test_a_redaction_rule_on_every_list_item_and_on_the_answer(tmp_path: Path) -> None:
    rule = Redaction.parse("drop:response.choices[*].message.tool_calls")
    redacted = rule.apply(answer())
    assert redacted == {"choices": [{"message": {"role": "assistant"}}]}
    every = Redaction.parse("hash:request.messages[*].content").apply(body("x"))
    assert all(m["content"].startswith("sha256:") for m in every["messages"])
    # A path that is not there leaves the body alone.
    assert Redaction.parse("drop:request.nope.deeper").apply(body()) == body()


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ("erase:request.x", "expected 'drop:' or 'hash:'"),
        ("drop:messages", "starts with 'request.' or 'response.'"),
        ("drop:request.", "starts with 'request.' or 'response.'"),
        ("hash:request.a..b", "bad path segment ''"),
        ("hash:request.a[x]", "bad path segment 'a[x]'"),
    ],
)
def test_a_bad_redaction_rule_is_refused_naming_it(rule: str, says: str) -> None:
    with pytest.raises(ValueError, match="redaction rule") as info:
        Capture("/tmp/never-written", redact=[rule])
    assert says in str(info.value) and rule in str(info.value)


def test_past_the_days_size_cap_requests_are_counted_not_written(tmp_path: Path) -> None:
    clock = Clock(T0)
    capture = Capture(tmp_path, share=1.0, max_bytes_per_day=5_000, clock=clock)
    written = sum(
        capture.record(body(), answer=answer(), status_code=200, pool="stable") for _ in range(20)
    )
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert 0 < written < 20 and size <= 5_000
    assert capture.skipped_over_cap == 20 - written
    clock.now = T0 + timedelta(days=1)  # a new day starts empty
    assert capture.record(body(), answer=answer(), status_code=200, pool="stable")


def test_days_past_retention_are_deleted(tmp_path: Path) -> None:
    old = tmp_path / "2026-11-20.requests.jsonl"
    kept = tmp_path / "2026-12-01.requests.jsonl"
    unrelated = tmp_path / "notes.txt"
    for path in (old, kept, unrelated):
        path.write_text("x\n")
    capture = Capture(tmp_path, share=1.0, retention=timedelta(days=7), clock=Clock(T0))
    capture.expire()
    assert not old.exists() and kept.exists() and unrelated.exists()


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
    requests = tmp_path / "2026-12-04.requests.jsonl"
    responses = tmp_path / "2026-12-04.responses.jsonl"
    with requests.open("a") as handle:
        handle.write('{"custom_id": 7, "body": {}}\n')
    with responses.open("a") as handle:
        handle.write('{"custom_id": "nobody", "response": {}}\n')
        handle.write('{"custom_id": "x", "response": {"status_co')
    read = read_capture(tmp_path, since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=4))
    assert len(read.records) == 3  # minutes 1, 2, 3
    assert all(
        r.pool == "stable" and r.request["messages"][1]["content"] == SECRET for r in read.records
    )
    problems = [str(p) for p in read.problems]
    assert f"{requests}:6: custom_id: missing or not a string" in problems
    assert f"{responses}:6: custom_id: no request line with this custom_id" in problems
    assert f"{responses}:7: not a JSON object (cut off: the file ends mid-line)" in problems
    assert not any(SECRET in p for p in problems)
