"""Reading what the gateway captured: OpenAI Batch JSONL, a pair of files a day.

The layout is the one ``rolloutd.gateway.Capture`` writes (its docstring has the details):
``YYYY-MM-DD.requests.jsonl`` holds Batch input lines (``custom_id``, ``method``, ``url``,
``body``) and ``YYYY-MM-DD.responses.jsonl`` Batch output lines (``custom_id``, ``response``
with ``status_code`` and ``body``, ``error``) with rolloutd's ``rolloutd`` key: the pool, the
session's hash and the time. Any gateway that logs chat completions can write the same; a pair
written by hand, or by vLLM's ``run-batch``, without the ``rolloutd`` key has no pool and no
time: its lines count for the file's day, and the sample needs to be told which pool answered.
A failed request's output line (``"response": null`` and an ``error``, as the Batch API writes
it) is read as an answer without a status.

Nothing of a line's content is ever put in a message: a problem names the file, the line and
the field. A truncated or corrupt line (not JSON, a key missing, an answer without its request,
a request without its answer) is reported and skipped; every other line is kept. Memory is
bounded per line (:data:`MAX_LINE_BYTES`) and per file (:data:`MAX_FILE_BYTES`); what is kept
is the stretch's records, which the gateway's daily cap bounds.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from rolloutd.errors import Problem
from rolloutd.gateway import CAPTURE_KEY, REQUESTS_SUFFIX, RESPONSES_SUFFIX

MAX_LINE_BYTES = 8 * 1024 * 1024
"""A captured line longer than this is reported and skipped (a 70B model's context of
131,072 tokens is about 0.5 MB of text)."""
MAX_FILE_BYTES = 2 * 1024**3
"""A day file larger than this is reported and not read: four times the gateway's default
daily cap, and several times that in memory once parsed."""
MAX_PROBLEMS = 1000
"""Problems kept in a read; past them only counted (a file of garbage is one fault, not a
million lines to print)."""
_DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})\.(?:requests|responses)\.jsonl$")


@dataclass(frozen=True)
class Captured:
    """One captured request and its answer."""

    custom_id: str
    request: dict[str, Any] = field(repr=False)
    """The Batch input line's ``body``."""
    status_code: int | None
    """The answer's HTTP status; None for a request that failed without one."""
    answer: dict[str, Any] | None = field(repr=False)
    """The Batch output line's ``response.body``, None when it is not a JSON object."""
    pool: str | None
    """The pool that answered, None when the line does not say."""
    session: str | None
    """The sha256 of the session id, as the gateway wrote it."""
    at: datetime | None
    """When the answer was recorded (UTC), None when the line does not say."""
    where: str
    """``file:line`` of the request line."""
    size: int
    """Bytes of the two lines."""


@dataclass(frozen=True)
class CaptureRead:
    """The captured requests of a stretch of time, and the lines that could not be read."""

    records: tuple[Captured, ...]
    problems: tuple[Problem, ...]
    """The first :data:`MAX_PROBLEMS` problems, in the order met."""
    files: tuple[str, ...]
    """The day files read."""
    unreported: int = 0
    """Problems past :data:`MAX_PROBLEMS`, counted only."""

    @property
    def problem_count(self) -> int:
        return len(self.problems) + self.unreported


class _Problems:
    """The problems of a read: the first :data:`MAX_PROBLEMS` kept, the rest counted."""

    def __init__(self) -> None:
        self.kept: list[Problem] = []
        self.unreported = 0

    def add(self, source: str, field_name: str, message: str) -> None:
        if len(self.kept) < MAX_PROBLEMS:
            self.kept.append(Problem(source, field_name, message))
        else:
            self.unreported += 1


def read_capture(directory: Path, *, since: datetime, until: datetime) -> CaptureRead:
    """The requests captured in ``directory`` from ``since`` up to (not including) ``until``.

    Reads the day files whose UTC day overlaps the stretch (a naive time is taken as UTC).
    A record with a time is kept when the time is in the stretch; one without (a capture
    without rolloutd's key) is kept with its file's day. Bad lines are problems, skipped.

    :raises OSError: the directory cannot be listed.
    """
    since, until = _utc(since), _utc(until)
    problems = _Problems()
    records: list[Captured] = []
    files: list[str] = []
    for day in _days(directory, since, until):
        stem = directory / day.isoformat()
        requests, responses = Path(f"{stem}{REQUESTS_SUFFIX}"), Path(f"{stem}{RESPONSES_SUFFIX}")
        files += [str(p) for p in (requests, responses) if p.exists()]
        found = _read_day(requests, responses, problems)
        records += [r for r in found if r.at is None or since <= r.at < until]
    return CaptureRead(tuple(records), tuple(problems.kept), tuple(files), problems.unreported)


def _days(directory: Path, since: datetime, until: datetime) -> list[date]:
    """The days with a capture file in ``directory`` that overlap [since, until), in order.

    The directory is listed, not probed day by day: a stretch of centuries costs one listing.
    """
    if until <= since:
        return []
    first, last = since.date(), (until - timedelta(microseconds=1)).date()
    days = set()
    for path in directory.iterdir():
        match = _DAY.match(path.name)
        if match is None:
            continue
        try:
            day = date.fromisoformat(match.group(1))
        except ValueError:
            continue  # 2026-13-45: not a day file
        if first <= day <= last:
            days.add(day)
    return sorted(days)


def _read_day(requests: Path, responses: Path, problems: _Problems) -> list[Captured]:
    inputs: dict[str, tuple[dict[str, Any], str, int]] = {}
    if not requests.exists():
        problems.add(str(requests), "", "missing: the answers have no requests")
    for where, size, line in _lines(requests, problems):
        custom_id, body = line.get("custom_id"), line.get("body")
        if not isinstance(custom_id, str) or not custom_id:
            problems.add(where, "custom_id", "missing or not a string")
        elif not isinstance(body, dict):
            problems.add(where, "body", "missing or not an object")
        elif custom_id in inputs:
            problems.add(where, "custom_id", "seen before in this file")
        else:
            inputs[custom_id] = (body, where, size)
    records: list[Captured] = []
    answered: set[str] = set()
    for where, size, line in _lines(responses, problems):
        record = _joined(where, size, line, inputs, answered, problems)
        if record is not None:
            answered.add(record.custom_id)
            records.append(record)
    for custom_id, (_, where, _) in inputs.items():
        if custom_id not in answered:
            problems.add(where, "custom_id", "no answer line (cut off?)")
    return records


def _joined(
    where: str,
    size: int,
    line: dict[str, Any],
    inputs: dict[str, tuple[dict[str, Any], str, int]],
    answered: set[str],
    problems: _Problems,
) -> Captured | None:
    """The record an output line makes with its input line, or None and a problem."""
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or custom_id not in inputs:
        problems.add(where, "custom_id", "no request line with this custom_id")
        return None
    if custom_id in answered:
        problems.add(where, "custom_id", "answered twice")
        return None
    if "response" not in line:
        problems.add(where, "response", "missing")
        return None
    response = line["response"]
    # The Batch API writes a request that failed without an HTTP answer as "response": null.
    if response is None:
        status, answer = None, None
    elif isinstance(response, dict):
        status, answer = response.get("status_code"), response.get("body")
        if not isinstance(status, int) or isinstance(status, bool):
            problems.add(where, "response.status_code", "missing or not a whole number")
            return None
    else:
        problems.add(where, "response", "not an object or null")
        return None
    meta = line.get(CAPTURE_KEY)
    meta = meta if isinstance(meta, dict) else {}
    at = _time(meta.get("at"))
    if meta.get("at") is not None and at is None:
        problems.add(where, f"{CAPTURE_KEY}.at", "not an ISO 8601 time")
        return None
    body, request_where, request_size = inputs[custom_id]
    pool, session = meta.get("pool"), meta.get("session")
    return Captured(
        custom_id=custom_id,
        request=body,
        status_code=status,
        answer=answer if isinstance(answer, dict) else None,
        pool=pool if isinstance(pool, str) else None,
        session=session if isinstance(session, str) else None,
        at=at,
        where=request_where,
        size=request_size + size,
    )


def _lines(path: Path, problems: _Problems) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(``file:line``, bytes, object) of each JSON line; problems for the rest."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        problems.add(str(path), "", f"cannot read: {exc.strerror or exc}")
        return
    if not stat.S_ISREG(info.st_mode):
        # A FIFO would block the read for ever, a device never end.
        problems.add(str(path), "", "not a regular file; not read")
        return
    if info.st_size > MAX_FILE_BYTES:
        problems.add(
            str(path), "", f"is {info.st_size} bytes, more than {MAX_FILE_BYTES}; not read"
        )
        return
    try:
        handle = path.open("rb")
    except OSError as exc:
        problems.add(str(path), "", f"cannot read: {exc.strerror or exc}")
        return
    with handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            where = f"{path}:{number}"
            if len(raw) > MAX_LINE_BYTES:
                problems.add(where, "", f"longer than {MAX_LINE_BYTES} bytes")
                while raw and not raw.endswith(b"\n"):  # skip to the line's end
                    raw = handle.readline(MAX_LINE_BYTES + 1)
                continue
            if not raw.strip():
                continue
            value = _parsed(raw, where, problems)
            if value is not None:
                yield where, len(raw), value


def _parsed(raw: bytes, where: str, problems: _Problems) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except RecursionError:
        # Thousands of "[" in a row: bad input, not a fault of the reader.
        problems.add(where, "", "nested too deeply to read")
        return None
    except ValueError:  # also UnicodeDecodeError, and ints of thousands of digits
        cut = "" if raw.endswith(b"\n") else " (cut off: the file ends mid-line)"
        problems.add(where, "", f"not a JSON object{cut}")
        return None
    if not isinstance(value, dict):
        problems.add(where, "", "not a JSON object")
        return None
    return value


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return _utc(parsed)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
