"""A day of capture as a suite: stable's tool calls are the reference, every drop counted by
reason, duplicates removed, a rare tool kept, the same seed the same sample; and
``rolloutctl suite sample`` printing it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rolloutd.evaluation.capture import read_capture
from rolloutd.evaluation.sampling import sample_cases, sample_day
from rolloutd.evaluation.suite import load_suite
from rolloutd.gateway import Capture
from tests.capture.build import SECRET, T0, Clock, answer, body
from tests.cli import Ctl

DAY = (T0, T0 + timedelta(days=1))


def _tool_body(tool: str, text: str) -> dict[str, Any]:
    request = body(text)
    request["tools"][0]["function"]["name"] = tool
    return request


def _capture(tmp_path: Path) -> Capture:
    """A day: 40 refunds and 2 callbacks answered by stable, 5 by the canary, 3 refunds
    asked twice, 2 without a tool call, 1 error, 1 with arguments that are not JSON, 1
    naming a tool not offered."""
    clock = Clock(T0 + timedelta(hours=1))
    capture = Capture(tmp_path, share=1.0, clock=clock)
    record = capture.record
    for i in range(40):
        record(
            _tool_body("issue_refund", f"refund {i}"),
            answer=answer(f"O{i}"),
            status_code=200,
            pool="stable",
        )
    for i in range(3):
        record(
            _tool_body("issue_refund", f"refund {i}"),
            answer=answer(f"O{i}"),
            status_code=200,
            pool="stable",
        )
    for i in range(2):
        record(
            _tool_body("schedule_callback", f"call me {i}"),
            answer=answer(f"C{i}", name="schedule_callback"),
            status_code=200,
            pool="stable",
        )
    for i in range(5):
        record(
            _tool_body("issue_refund", f"canary {i}"),
            answer=answer(),
            status_code=200,
            pool="canary",
        )
    chat = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
    for i in range(2):
        record(_tool_body("issue_refund", f"chat {i}"), answer=chat, status_code=200, pool="stable")
    record(
        _tool_body("issue_refund", "boom"), answer={"error": "x"}, status_code=500, pool="stable"
    )
    broken = answer()
    broken["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
    record(_tool_body("issue_refund", "garbled"), answer=broken, status_code=200, pool="stable")
    record(
        _tool_body("issue_refund", "wrong tool"),
        answer=answer(name="delete_everything"),
        status_code=200,
        pool="stable",
    )
    return capture


def test_stable_tool_calls_become_cases_and_every_drop_has_its_reason(tmp_path: Path) -> None:
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
    assert case["expected"]["name"] == "schedule_callback"
    assert case["expected"]["arguments"]["order_id"].startswith("C")
    assert case["meta"]["session"] is None and len(case["meta"]["request_sha256"]) == 64


def test_the_same_seed_draws_the_same_suite_and_another_seed_another(tmp_path: Path) -> None:
    _capture(tmp_path)
    common: dict[str, Any] = {"since": DAY[0], "until": DAY[1], "cases": 10}
    first = sample_day(tmp_path, seed=3, out=tmp_path / "a.jsonl", **common)
    again = sample_day(tmp_path, seed=3, out=tmp_path / "b.jsonl", **common)
    other = sample_day(tmp_path, seed=4, out=tmp_path / "c.jsonl", **common)
    assert first.sha256 == again.sha256 != other.sha256
    suite = load_suite(tmp_path / "a.jsonl")  # the sample is a suite the gates can run
    assert len(suite) == 10 and {c.tags for c in suite.cases} == {
        ("issue_refund",),
        ("schedule_callback",),
    }


def test_a_hand_written_batch_capture_gives_the_same_sample(tmp_path: Path) -> None:
    """The same requests written by hand as plain OpenAI Batch files (no rolloutd key, so no
    pool: --assume-pool stable says which answered) sample to the same cases."""
    gateway = tmp_path / "gateway"
    clock = Clock(T0 + timedelta(hours=2))
    capture = Capture(gateway, share=1.0, clock=clock)
    by_hand = tmp_path / "by-hand"
    by_hand.mkdir()
    inputs, outputs = [], []
    for i in range(30):
        request, reply = _tool_body("issue_refund", f"refund {i}"), answer(f"O{i}")
        capture.record(request, answer=reply, status_code=200, pool="stable", session=f"s{i}")
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
    (by_hand / "2026-12-04.requests.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in inputs)
    )
    (by_hand / "2026-12-04.responses.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in reversed(outputs))
    )
    common: dict[str, Any] = {"since": DAY[0], "until": DAY[1], "cases": 12, "seed": 9, "out": None}
    ours = sample_cases(read_capture(gateway, since=DAY[0], until=DAY[1]).records, cases=12, seed=9)
    theirs = sample_day(by_hand, assume_pool="stable", **common)
    unknown = sample_day(by_hand, **common)
    hand = sample_cases(
        read_capture(by_hand, since=DAY[0], until=DAY[1]).records,
        cases=12,
        seed=9,
        assume_pool="stable",
    )
    strip = lambda lines: [(c["id"], c["expected"], c["messages"]) for c in lines]  # noqa: E731
    assert strip(ours.lines) == strip(hand.lines) and theirs.kept == 12
    assert unknown.kept == 0 and unknown.dropped == {"pool unknown": 30}


@pytest.fixture
def offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Ctl:
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


def test_suite_sample_prints_what_it_kept_and_dropped_and_never_the_content(
    offline: Ctl, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    capture = tmp_path / "capture"
    clock = Clock(T0 + timedelta(hours=1))
    writer = Capture(capture, share=1.0, clock=clock)
    for i in range(12):
        writer.record(
            _tool_body("issue_refund", f"{SECRET} {i}"),
            answer=answer(f"O{i}"),
            status_code=200,
            pool="stable",
        )
    with (capture / "2026-12-04.responses.jsonl").open("a") as handle:
        handle.write('{"custom_id": "cut", "resp')
    out = tmp_path / "live.jsonl"
    code, text, err = offline(
        "suite", "sample", str(capture), "--day", "2026-12-04", "--cases", "10", "--out", str(out)
    )
    assert code == 0, err
    assert text.splitlines()[:3] == [
        f"{out}: 10 cases (sha256 {text.split('sha256 ')[1][:12]})",
        "  issue_refund: 10 of 12",
        "  dropped 2: not sampled",
    ]
    assert f"{capture}/2026-12-04.responses.jsonl:13: not a JSON object (cut off" in err
    assert SECRET not in text + err + caplog.text
    code, text, _ = offline(
        "suite",
        "sample",
        str(capture),
        "--day",
        "2026-12-04",
        "--cases",
        "10",
        "--out",
        str(out),
        "-o",
        "json",
    )
    report = json.loads(text)
    assert (report["kept"], report["dropped"], report["by_tool"]) == (
        10,
        {"not sampled": 2},
        {"issue_refund": 10},
    )
    assert len(load_suite(out)) == 10


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--day", "2026-13-01"], "--day: expected YYYY-MM-DD, got '2026-13-01'"),
        (["--day", "2026-12-01"], "nothing captured from 2026-12-01T00:00:00+00:00"),
        (["--since", "2026-12-04T00:00:00Z"], "--since/--until: give both, or neither"),
        (
            ["--since", "2026-12-05T00:00:00Z", "--until", "2026-12-04T00:00:00Z"],
            "must be later than --since",
        ),
        (
            ["--day", "2026-12-04", "--assume-pool", "canary"],
            "no usable captured case (10 served by canary)",
        ),
        (["--last", "soon"], "--last: "),
        (["--last", "0s"], "--last: must be longer than 0s"),
        (["--day", "2026-12-04", "--last", "1h"], "--last: give one of --day, --since/--until"),
    ],
)
def test_suite_sample_refuses_bad_input_and_writes_nothing(
    offline: Ctl, tmp_path: Path, args: list[str], says: str
) -> None:
    capture = tmp_path / "capture"
    clock = Clock(T0 + timedelta(hours=1))
    hand = Capture(capture, share=1.0, clock=clock)
    for i in range(10):
        hand.record(
            _tool_body("issue_refund", f"r{i}"), answer=answer(), status_code=200, pool="stable"
        )
    # Without rolloutd's key the pool is what --assume-pool says.
    for name in ("requests", "responses"):
        path = capture / f"2026-12-04.{name}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row.pop("rolloutd", None)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "live.jsonl"
    code, _, err = offline("suite", "sample", str(capture), "--out", str(out), *args)
    assert code == 2 and says in err, err
    assert "Traceback" not in err and not out.exists()
    code, _, err = offline("suite", "sample", str(tmp_path / "missing"), "--out", str(out))
    assert code == 2 and "no such capture directory" in err and not out.exists()
