"""A day of capture as a suite: stable's tool calls are the reference, every drop counted by
reason, duplicates removed, a rare tool kept, the same seed the same sample, a hand-written
Batch capture sampled as the gateway's, and the suite written whole or not at all."""

from __future__ import annotations

import json
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rolloutd.evaluation.capture import Captured, read_capture
from rolloutd.evaluation.sampling import REASONS, sample_cases, sample_day, write_suite
from rolloutd.evaluation.suite import load_suite
from rolloutd.gateway import Capture, session_digest
from tests.capture.build import T0, Clock, answer, body

DAY = (T0.replace(hour=0), T0.replace(hour=0) + timedelta(days=1))


def _capture(directory: Path) -> Capture:
    """A day: 40 refunds and 2 callbacks answered by stable, 5 by the canary, 3 refunds
    asked twice, 2 without a tool call, 1 error, 1 with arguments that are not JSON, 1
    naming a tool not offered."""
    capture = Capture(directory, share=1.0, clock=Clock(T0 + timedelta(hours=1)))
    record = capture.record
    for i in [*range(40), *range(3)]:
        record(body(f"refund {i}"), answer=answer(f"O{i}"), status_code=200, pool="stable")
    for i in range(2):
        record(
            body(f"call me {i}", tool="schedule_callback"),
            answer=answer(f"C{i}", name="schedule_callback"),
            status_code=200,
            pool="stable",
            session=f"caller-{i}",
        )
    for i in range(5):
        record(body(f"canary {i}"), answer=answer(), status_code=200, pool="canary")
    chat = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
    for i in range(2):
        record(body(f"chat {i}"), answer=chat, status_code=200, pool="stable")
    record(body("boom"), answer={"error": "x"}, status_code=500, pool="stable")
    broken = answer()
    broken["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
    record(body("garbled"), answer=broken, status_code=200, pool="stable")
    record(body("wrong"), answer=answer(name="delete_everything"), status_code=200, pool="stable")
    return capture


def test_stable_tool_calls_become_cases_and_every_drop_has_its_reason(tmp_path: Path) -> None:
    """A day's capture keeps stable's tool calls as references and counts each drop by
    its reason."""
    _capture(tmp_path)
    read = read_capture(tmp_path, since=DAY[0], until=DAY[1])
    sample = sample_cases(read.records, cases=20, seed=1)
    assert sample.available == {"issue_refund": 40, "schedule_callback": 2}
    assert sample.by_tool == {"issue_refund": 18, "schedule_callback": 2}  # the rare tool kept
    assert sample.dropped == {
        "error status": 1,
        "served by canary": 5,
        "no tool call": 2,
        "unparseable": 1,
        "not a valid case": 1,
        "duplicate": 3,
        "not sampled": 22,
    }
    case = next(line for line in sample.lines if line["tags"] == ["schedule_callback"])
    assert case["expected"] == {"name": "schedule_callback", "arguments": {"order_id": "C0"}}
    assert case["meta"]["session"] == session_digest("caller-0")
    assert (
        case["meta"]["custom_id"].startswith("req-") and len(case["meta"]["request_sha256"]) == 64
    )
    assert case["id"] == "live-" + case["meta"]["request_sha256"][:16]


def _record(**overrides: Any) -> Captured:
    fields: dict[str, Any] = {
        "custom_id": "c",
        "request": body(),
        "status_code": 200,
        "answer": answer(),
        "pool": "stable",
        "session": None,
        "at": T0,
        "where": "capture/2026-12-04.requests.jsonl:1",
        "size": 900,
    }
    return Captured(**(fields | overrides))


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (_record(status_code=429), "error status"),
        (_record(status_code=None, answer=None), "error status"),
        (_record(pool="canary"), "served by canary"),
        (_record(pool=None), "pool unknown"),
        (_record(pool="unknown"), "pool unknown"),
        (_record(request=body(tools=False)), "no tool call"),
        (_record(answer={"choices": [{"message": {"tool_calls": []}}]}), "no tool call"),
        (_record(answer=None), "unparseable"),
        (_record(answer={"choices": []}), "unparseable"),
        (
            _record(answer={"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}),
            "unparseable",
        ),
        (
            _record(
                answer=answer(order="x")
                | {
                    "choices": [
                        {
                            "message": {
                                "tool_calls": [
                                    {
                                        "function": {
                                            "name": "issue_refund",
                                            "arguments": "[" * 50_000,
                                        }
                                    }
                                ]
                            }
                        }
                    ]
                }
            ),
            "unparseable",
        ),
        (
            _record(
                answer={
                    "choices": [
                        {
                            "message": {
                                "tool_calls": [
                                    {"function": {"name": "issue_refund", "arguments": "[1]"}}
                                ]
                            }
                        }
                    ]
                }
            ),
            "unparseable",
        ),
        (_record(answer=answer(name="not_offered")), "not a valid case"),
        (_record(size=2_000_000), "over size"),
    ],
)
def test_each_reason_a_record_is_dropped_is_counted(record: Captured, reason: str) -> None:
    """Each kind of unusable record is dropped under its own reason."""
    sample = sample_cases([record], cases=5, seed=0)
    assert sample.kept == 0 and sample.dropped == {reason: 1}
    assert reason in REASONS


def test_the_assumed_pool_answers_only_for_lines_that_do_not_say() -> None:
    """``assume_pool`` fills in a missing pool and never overrides the one a line names."""
    records = [_record(pool=None), _record(pool="canary", request=body("other"))]
    sample = sample_cases(records, cases=5, seed=0, assume_pool="stable")
    assert sample.kept == 1 and sample.dropped == {"served by canary": 1}
    sample = sample_cases(records, cases=5, seed=0, assume_pool="canary")
    assert sample.kept == 0 and sample.dropped == {"served by canary": 2}


def test_a_duplicate_is_the_same_messages_and_tools_whatever_else_differs() -> None:
    """Another model, temperature or session does not make another case."""
    again = body() | {"model": "other", "temperature": 0.7}
    records = [
        _record(),
        _record(request=again, custom_id="d", session="s"),
        _record(request=body("x")),
    ]
    sample = sample_cases(records, cases=5, seed=0)
    assert sample.kept == 2 and sample.dropped == {"duplicate": 1}


def test_rare_tools_keep_every_call_and_the_common_ones_share_the_rest() -> None:
    """Budget 30 over tools with 2, 5, 100 and 100 usable cases: 2 + 5 + 12 + 11."""
    records = []
    for tool, count in (("rare", 2), ("scarce", 5), ("common", 100), ("frequent", 100)):
        for i in range(count):
            records.append(
                _record(request=body(f"{tool} {i}", tool=tool), answer=answer(f"{i}", name=tool))
            )
    sample = sample_cases(records, cases=30, seed=3)
    assert sample.by_tool == {"common": 12, "frequent": 11, "rare": 2, "scarce": 5}
    assert sample.kept == 30 and sample.dropped == {"not sampled": 177}
    assert sample_cases(records, cases=500, seed=3).kept == 207


@pytest.mark.parametrize(
    ("options", "says"),
    [({"cases": 0}, "cases must be at least 1"), ({"assume_pool": "stabel"}, "assume_pool")],
)
def test_a_bad_budget_or_pool_is_refused(options: dict[str, Any], says: str) -> None:
    """A budget under one case or an unknown pool to assume is a ValueError."""
    with pytest.raises(ValueError, match=says):
        sample_cases([_record()], **({"cases": 5, "seed": 0} | options))


def test_the_same_seed_draws_the_same_suite_and_another_seed_another(tmp_path: Path) -> None:
    """The written suite loads as a suite the gates can run, tagged by tool."""
    _capture(tmp_path / "capture")
    common: dict[str, Any] = {"since": DAY[0], "until": DAY[1], "cases": 10}
    first = sample_day(tmp_path / "capture", seed=3, out=tmp_path / "a.jsonl", **common)
    again = sample_day(tmp_path / "capture", seed=3, out=tmp_path / "b.jsonl", **common)
    other = sample_day(tmp_path / "capture", seed=4, out=tmp_path / "c.jsonl", **common)
    assert first.sha256 == again.sha256 != other.sha256
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    suite = load_suite(tmp_path / "a.jsonl")
    assert len(suite) == 10 and {c.tags for c in suite.cases} == {
        ("issue_refund",),
        ("schedule_callback",),
    }
    assert first.out == str(tmp_path / "a.jsonl") and first.kept == 10
    assert first.by_tool == {"issue_refund": 8, "schedule_callback": 2}
    assert first.problems == () and len(first.files) == 2


def test_a_hand_written_batch_capture_gives_the_same_sample(tmp_path: Path) -> None:
    """The same requests written by hand as plain OpenAI Batch files, answers in another
    order and no rolloutd key (so no pool: assume_pool says which answered), sample to the
    same cases as the gateway's capture."""
    gateway = Capture(tmp_path / "gateway", share=1.0, clock=Clock(T0))
    inputs, outputs = [], []
    for i in range(30):
        tool = "schedule_callback" if i % 10 == 0 else "issue_refund"
        request, reply = body(f"ask {i}", tool=tool), answer(f"O{i}", name=tool)
        gateway.record(request, answer=reply, status_code=200, pool="stable", session=f"s{i}")
        inputs.append(
            {
                "custom_id": f"task-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": request,
            }
        )
        outputs.append(
            {
                "id": f"batch_req_{i}",
                "custom_id": f"task-{i}",
                "response": {"status_code": 200, "request_id": f"r{i}", "body": reply},
                "error": None,
            }
        )
    by_hand = tmp_path / "by-hand"
    by_hand.mkdir()
    (by_hand / "2026-12-04.requests.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in inputs)
    )
    (by_hand / "2026-12-04.responses.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in reversed(outputs))
    )
    common: dict[str, Any] = {"since": DAY[0], "until": DAY[1], "cases": 12, "seed": 9}
    ours = sample_day(tmp_path / "gateway", out=tmp_path / "ours.jsonl", **common)
    theirs = sample_day(by_hand, assume_pool="stable", out=tmp_path / "theirs.jsonl", **common)
    assert (
        (ours.kept, ours.by_tool)
        == (theirs.kept, theirs.by_tool)
        == (
            12,
            {"issue_refund": 9, "schedule_callback": 3},
        )
    )

    def cases(path: Path) -> list[tuple[str, str, Any, Any]]:
        return [
            (c.id, c.expected_name, c.expected_arguments, c.messages)
            for c in load_suite(path).cases
        ]

    assert cases(tmp_path / "ours.jsonl") == cases(tmp_path / "theirs.jsonl")
    unknown = sample_day(by_hand, out=None, **common)
    assert unknown.kept == 0 and unknown.dropped == {"pool unknown": 30} and unknown.out is None


def test_the_suite_is_written_whole_for_the_group_and_nothing_when_it_fails(
    tmp_path: Path,
) -> None:
    """The suite appears whole (0640, no temporary left) or not at all."""
    sample = sample_cases([_record(), _record(request=body("x"))], cases=5, seed=0)
    out = tmp_path / "suites" / "live.jsonl"
    old = os.umask(0o022)
    try:
        digest = write_suite(sample, out)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and len(digest) == 64
    assert [p.name for p in out.parent.iterdir()] == ["live.jsonl"]  # no temporary left
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(OSError):
        write_suite(sample, blocked / "live.jsonl")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
