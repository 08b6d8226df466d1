"""``rolloutctl suite sample``: what it kept per tool and dropped and why, in text and JSON,
unreadable lines by file and line; bad input exits 2 with a clear message, writes nothing,
and no captured content ever reaches the output, the errors or the log."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rolloutd.evaluation.suite import load_suite
from rolloutd.gateway import Capture
from tests.capture.build import SECRET, T0, Clock, answer, body, day_files
from tests.cli import Ctl


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Ctl:
    """rolloutctl with no database: the command must not need one."""
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


def _captured(directory: Path, count: int = 12, *, at: datetime = T0, pool: str = "stable") -> Path:
    """``count`` refunds whose prompts carry the secret, answered by ``pool``."""
    writer = Capture(directory, share=1.0, clock=Clock(at))
    for i in range(count):
        writer.record(body(f"{SECRET} {i}"), answer=answer(f"O{i}"), status_code=200, pool=pool)
    writer.close()
    return directory


def test_it_prints_what_it_kept_and_dropped_and_never_the_content(
    ctl: Ctl, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Text and JSON say kept per tool, dropped by reason and the cut line by file:line,
    and never a prompt."""
    caplog.set_level(logging.DEBUG)
    capture = _captured(tmp_path / "capture")
    responses = day_files(capture)[1]
    with responses.open("a") as handle:
        handle.write(f'{{"custom_id": "cut", "response": {{"body": "{SECRET}')
    out = tmp_path / "live.jsonl"
    argv = ["suite", "sample", str(capture), "--day", "2026-12-04", "--cases", "10"]
    code, text, err = ctl(*argv, "--out", str(out))
    assert code == 0, err
    digest = text.split("sha256 ")[1][:12]
    assert text.splitlines() == [
        f"{out}: 10 cases (sha256 {digest})",
        "  issue_refund: 10 of 12",
        "  dropped 2: not sampled",
    ]
    assert err.splitlines() == [
        f"  skipped {responses}:13: not a JSON object (cut off: the file ends mid-line)"
    ]
    assert SECRET not in text + err + caplog.text
    assert len(load_suite(out)) == 10
    report = ctl.json(*argv, "--out", str(out))
    assert (report["kept"], report["dropped"], report["by_tool"], report["available"]) == (
        10,
        {"not sampled": 2},
        {"issue_refund": 10},
        {"issue_refund": 12},
    )
    assert report["problems"] == [
        f"{responses}:13: not a JSON object (cut off: the file ends mid-line)"
    ]
    assert report["out"] == str(out) and report["sha256"].startswith(digest)
    assert report["since"] == "2026-12-04T00:00:00+00:00"
    assert report["until"] == "2026-12-05T00:00:00+00:00"
    assert SECRET not in json.dumps(report)


def test_without_a_day_it_samples_yesterday(ctl: Ctl, tmp_path: Path) -> None:
    """With no stretch given, the command samples yesterday (UTC)."""
    yesterday = datetime.now(UTC) - timedelta(days=1)
    capture = _captured(tmp_path / "capture", 3, at=yesterday)
    report = ctl.json("suite", "sample", str(capture), "--out", str(tmp_path / "live.jsonl"))
    assert report["kept"] == 3 and report["since"].startswith(yesterday.date().isoformat())


def test_since_and_until_pick_a_stretch(ctl: Ctl, tmp_path: Path) -> None:
    """--since/--until keep the records timed inside and drop those outside."""
    capture = _captured(tmp_path / "capture", 4)
    common = ["suite", "sample", str(capture), "--out", str(tmp_path / "live.jsonl")]
    inside = ctl.json(*common, "--since", "2026-12-04T09:00:00Z", "--until", "2026-12-04T11:00")
    assert inside["kept"] == 4
    code, _, err = ctl(*common, "--since", "2026-12-04T11:00:00Z", "--until", "2026-12-04T12:00Z")
    assert code == 2 and "no usable captured case" in err


def test_the_help_says_what_it_does_with_examples(ctl: Ctl) -> None:
    """--help shows the options and examples."""
    code, text, _ = ctl("suite", "sample", "--help")
    assert code == 0 and "Examples:" in text and "--assume-pool" in text and "--day" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--day", "2026-13-01"], "--day: expected YYYY-MM-DD, got '2026-13-01'"),
        (["--day", "2026-12-01"], "nothing captured from 2026-12-01T00:00:00+00:00"),
        (["--since", "2026-12-04T00:00:00Z"], "--since/--until: give both, or neither"),
        (["--since", "noon", "--until", "2026-12-04T00:00:00Z"], "--since: expected an ISO"),
        (
            ["--since", "2026-12-05T00:00:00Z", "--until", "2026-12-04T00:00:00Z"],
            "must be later than --since",
        ),
        (["--day", "2026-12-04"], "no usable captured case (10 pool unknown)"),
        (
            ["--day", "2026-12-04", "--assume-pool", "canary"],
            "no usable captured case (10 served by canary)",
        ),
        (["--day", "2026-12-04", "--assume-pool", "blue"], "'blue' is not one of"),
        (["--day", "2026-12-04", "--cases", "0"], "0 is not in the range 1<=x<=20000"),
        (["--day", "2026-12-04", "--cases", "many"], "'many' is not a valid integer"),
        (["--day", "2026-12-04", "--seed", "-1"], "--seed"),
        (["--last", "soon"], "--last: "),
        (["--last", "0s"], "--last: must be longer than 0s"),
        (["--day", "2026-12-04", "--last", "1h"], "--last: give one of --day, --since/--until"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message_and_writes_nothing(
    ctl: Ctl, tmp_path: Path, args: list[str], says: str
) -> None:
    """A capture without rolloutd's key (no pool) needs --assume-pool stable to be usable."""
    capture = _captured(tmp_path / "capture", 10)
    for path in day_files(capture):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(row | {"rolloutd": None}) + "\n" for row in rows))
    out = tmp_path / "live.jsonl"
    code, _, err = ctl("suite", "sample", str(capture), "--out", str(out), *args)
    assert code == 2 and says in err, err
    assert not out.exists() and SECRET not in err


def test_a_missing_capture_directory_or_an_unwritable_suite_exits_2(
    ctl: Ctl, tmp_path: Path
) -> None:
    """A missing capture, an --out that cannot be written or is a directory exits 2 naming it."""
    out = tmp_path / "live.jsonl"
    code, _, err = ctl("suite", "sample", str(tmp_path / "missing"), "--out", str(out))
    assert code == 2 and f"{tmp_path / 'missing'}: no such capture directory" in err
    assert not out.exists()
    capture = _captured(tmp_path / "capture", 3)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    code, _, err = ctl(
        "suite", "sample", str(capture), "--day", "2026-12-04", "--out", str(blocked / "x.jsonl")
    )
    assert code == 2 and f"{blocked / 'x.jsonl'}: cannot write the suite: Not a directory" in err
    assert SECRET not in err
    code, _, err = ctl(
        "suite", "sample", str(capture), "--day", "2026-12-04", "--out", str(tmp_path)
    )
    assert code == 2 and "is a directory" in err
