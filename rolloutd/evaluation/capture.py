"""Reading what the gateway captured: OpenAI Batch JSONL, a pair of files a day.

The layout is the one ``rolloutd.gateway.Capture`` writes: ``YYYY-MM-DD.requests.jsonl``
(Batch input lines: ``custom_id``, ``method``, ``url``, ``body``) and
``YYYY-MM-DD.responses.jsonl`` (Batch output lines: ``custom_id``, ``response`` with
``status_code`` and ``body``, and rolloutd's ``rolloutd`` key with the pool, the session's
hash and the time). Any gateway that logs chat completions can write the same; a pair written
by hand, or by vLLM's ``run-batch``, without the ``rolloutd`` key has no pool and no time: its
lines count for the file's day, and the sample needs to be told which pool answered.

Nothing of a line's content is ever put in a message: a problem names the file, the line and
the field. A truncated or corrupt line is reported and skipped; every other line is kept.
"""

from __future__ import annotations

import json
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


@dataclass(frozen=True)
class Captured:
    """One captured request and its answer."""

    custom_id: str
    request: dict[str, Any] = field(repr=False)
    status_code: int | None
    answer: dict[str, Any] | None = field(repr=False)
    pool: str | None
    session: str | None
    at: datetime | None
    where: str
    """``file:line`` of the request line."""
    size: int
    """Bytes of the two lines."""


@dataclass(frozen=True)
class CaptureRead:
    """The captured requests of a stretch of time, and the lines that could not be read."""

    records: tuple[Captured, ...]
    problems: tuple[Problem, ...]
    files: tuple[str, ...]


def read_capture(directory: Path, *, since: datetime, until: datetime) -> CaptureRead:
    """The requests captured in ``directory`` from ``since`` up to ``until``.

    Reads the days the stretch overlaps. A request without an answer line, an answer without
    its request, bad JSON, a missing key or a line over :data:`MAX_LINE_BYTES` is a problem,
    skipped. A record without a time (a capture without rolloutd's key) counts for its file's
    day.

    :raises OSError: the directory cannot be listed.
    """
    first, last = since.astimezone(UTC).date(), until.astimezone(UTC).date()
    records: list[Captured] = []
    problems: list[Problem] = []
    files: list[str] = []
    day = first
    while day <= last:
        stem = directory / day.isoformat()
        requests, responses = Path(f"{stem}{REQUESTS_SUFFIX}"), Path(f"{stem}{RESPONSES_SUFFIX}")
        if requests.exists() or responses.exists():
            files += [str(p) for p in (requests, responses) if p.exists()]
            found, trouble = _read_day(requests, responses)
            problems += trouble
            records += [r for r in found if _within(r, day, since, until)]
        day += timedelta(days=1)
    return CaptureRead(tuple(records), tuple(problems), tuple(files))


def _within(record: Captured, day: date, since: datetime, until: datetime) -> bool:
    if record.at is None:
        return True  # the file's day overlaps the stretch
    return since <= record.at < until


def _read_day(requests: Path, responses: Path) -> tuple[list[Captured], list[Problem]]:
    problems: list[Problem] = []
    inputs: dict[str, tuple[dict[str, Any], str, int]] = {}
    if not requests.exists():
        problems.append(Problem(str(requests), "", "missing: the answers have no requests"))
    for where, size, line in _lines(requests, problems):
        custom_id, body = line.get("custom_id"), line.get("body")
        if not isinstance(custom_id, str) or not custom_id:
            problems.append(Problem(where, "custom_id", "missing or not a string"))
        elif not isinstance(body, dict):
            problems.append(Problem(where, "body", "missing or not an object"))
        elif custom_id in inputs:
            problems.append(Problem(where, "custom_id", "seen before in this file"))
        else:
            inputs[custom_id] = (body, where, size)
    records: list[Captured] = []
    answered: set[str] = set()
    for where, size, line in _lines(responses, problems):
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or custom_id not in inputs:
            problems.append(Problem(where, "custom_id", "no request line with this custom_id"))
            continue
        if custom_id in answered:
            problems.append(Problem(where, "custom_id", "answered twice"))
            continue
        response = line.get("response")
        if not isinstance(response, dict):
            problems.append(Problem(where, "response", "missing or not an object"))
            continue
        meta = line.get(CAPTURE_KEY)
        meta = meta if isinstance(meta, dict) else {}
        at = _time(meta.get("at"))
        if meta.get("at") is not None and at is None:
            problems.append(Problem(where, f"{CAPTURE_KEY}.at", "not an ISO 8601 time"))
            continue
        answered.add(custom_id)
        body, request_where, request_size = inputs[custom_id]
        status = response.get("status_code")
        answer = response.get("body")
        records.append(
            Captured(
                custom_id=custom_id,
                request=body,
                status_code=status if isinstance(status, int) else None,
                answer=answer if isinstance(answer, dict) else None,
                pool=meta.get("pool") if isinstance(meta.get("pool"), str) else None,
                session=meta.get("session") if isinstance(meta.get("session"), str) else None,
                at=at,
                where=request_where,
                size=request_size + size,
            )
        )
    for custom_id, (_, where, _) in inputs.items():
        if custom_id not in answered:
            problems.append(Problem(where, "custom_id", "no answer line (cut off?)"))
    return records, problems


def _lines(path: Path, problems: list[Problem]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(``file:line``, bytes, object) of each JSON line; problems for the rest."""
    if not path.exists():
        return
    try:
        handle = path.open("rb")
    except OSError as exc:
        problems.append(Problem(str(path), "", f"cannot read: {exc.strerror or exc}"))
        return
    with handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            where = f"{path}:{number}"
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                problems.append(Problem(where, "", f"longer than {MAX_LINE_BYTES} bytes"))
                while raw and not raw.endswith(b"\n"):  # skip to the line's end
                    raw = handle.readline(MAX_LINE_BYTES + 1)
                continue
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                cut = "" if raw.endswith(b"\n") else " (cut off: the file ends mid-line)"
                problems.append(Problem(where, "", f"not a JSON object{cut}"))
                continue
            if not isinstance(value, dict):
                problems.append(Problem(where, "", "not a JSON object"))
                continue
            yield where, len(raw), value


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
