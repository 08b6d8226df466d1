"""A day of captured traffic as a suite: the stable pool's answers are the reference.

``sample_cases`` keeps the captured requests that offered tools and that the *stable* pool
answered with a tool call: that call (its name and parsed arguments) becomes the case's
``expected``, so a replay to each pool is scored against what the serving build did. Every
other request is dropped, counted by reason:

- ``error status``: the answer was not a 2xx, or had no body;
- ``served by canary``: the canary's answer is what is being judged, not a reference;
- ``pool unknown``: the capture does not say which pool answered (``assume_pool`` says it);
- ``no tool call``: no tools offered, or the answer called none;
- ``unparseable``: the answer is not a chat completion, or its arguments are not JSON;
- ``not a valid case``: the request or the answer fails the suite's own checks (e.g. the
  stable answer names a tool not offered, or breaks the tool's schema);
- ``over size``: the two lines hold more than ``max_case_bytes``;
- ``duplicate``: the same messages and tools as a request kept before (the sha256 of their
  canonical JSON);
- ``not sampled``: over the day's budget of ``cases``.

**Stratified by tool.** The budget is shared equally among the tools, each taking at most
what it has, the rest shared again among the tools that have more (water-filling): a tool
called twice a day keeps both calls, and the common tools split the remainder, so each tool
has as many cases as the budget allows for its own per-field test. Within a tool the cases
are drawn with a generator seeded by ``seed``: the same capture and seed give the same suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rolloutd.analysis.preflight import Check, Found, first_step_gates
from rolloutd.core.durations import format_duration
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.errors import BadInput
from rolloutd.evaluation.capture import Captured, CaptureRead, read_capture
from rolloutd.evaluation.suite import Suite, parse_suite

MAX_CASE_BYTES = 1024 * 1024
REASONS = (
    "error status",
    "served by canary",
    "pool unknown",
    "no tool call",
    "unparseable",
    "not a valid case",
    "over size",
    "duplicate",
    "not sampled",
)


@dataclass(frozen=True)
class Sample:
    """The sampled cases (suite lines) and what was dropped, by reason."""

    lines: tuple[dict[str, Any], ...] = field(repr=False)
    dropped: dict[str, int]
    by_tool: dict[str, int]
    """Kept cases per tool."""
    available: dict[str, int]
    """Usable cases per tool before the budget."""

    @property
    def kept(self) -> int:
        return len(self.lines)


@dataclass(frozen=True)
class SampleReport:
    """What ``sample_day`` read, kept and dropped, and where it wrote the suite."""

    kept: int
    dropped: dict[str, int]
    by_tool: dict[str, int]
    available: dict[str, int]
    problems: tuple[str, ...]
    """Lines that could not be read, as ``file:line: field: what``."""
    files: tuple[str, ...]
    out: str | None
    sha256: str | None

    def as_json(self) -> dict[str, Any]:
        """JSON-ready, for ``--output json`` and a run's evidence."""
        return {
            "kept": self.kept,
            "dropped": self.dropped,
            "by_tool": self.by_tool,
            "available": self.available,
            "problems": list(self.problems),
            "files": list(self.files),
            "out": self.out,
            "sha256": self.sha256,
        }


def sample_cases(
    records: Sequence[Captured],
    *,
    cases: int,
    seed: int,
    assume_pool: str | None = None,
    max_case_bytes: int = MAX_CASE_BYTES,
) -> Sample:
    """Up to ``cases`` suite cases from ``records``, stratified by tool (module docstring)."""
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    usable: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        case, reason = _case_of(record, assume_pool, max_case_bytes)
        if case is None:
            dropped[reason] += 1
            continue
        digest = case["meta"]["request_sha256"]
        if digest in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(digest)
        usable.setdefault(case["tags"][0], []).append(case)
    quota = _water_fill({tool: len(found) for tool, found in usable.items()}, cases)
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = []
    for tool in sorted(usable):
        found = sorted(usable[tool], key=lambda c: c["id"])
        chosen = rng.sample(found, quota[tool])
        dropped["not sampled"] += len(found) - len(chosen)
        lines += sorted(chosen, key=lambda c: c["id"])
    return Sample(
        lines=tuple(lines),
        dropped={reason: dropped[reason] for reason in REASONS if dropped[reason]},
        by_tool={tool: quota[tool] for tool in sorted(usable)},
        available={tool: len(usable[tool]) for tool in sorted(usable)},
    )


def suite_bytes(sample: Sample) -> bytes:
    """The sample as the bytes of a suite file (one sorted-key JSON object a line)."""
    return b"".join(
        (json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n").encode()
        for line in sample.lines
    )


def suite_of(sample: Sample, source: str) -> Suite:
    """The sample as a checked suite named ``source`` (its digest is that of its bytes).

    :raises BadInput: the sample holds no case.
    """
    return parse_suite(suite_bytes(sample), source)


def read_and_sample(
    capture: Path,
    *,
    since: datetime,
    until: datetime,
    cases: int,
    seed: int,
    assume_pool: str | None = None,
) -> tuple[Sample, CaptureRead]:
    """The sample of what ``capture`` holds from ``since`` to ``until``, and what was read
    (its files and the lines that could not be read).

    :raises BadInput: the capture directory does not exist or cannot be listed.
    """
    if not capture.is_dir():
        raise BadInput.one(str(capture), "", "no such capture directory")
    try:
        read = read_capture(capture, since=since, until=until)
    except OSError as exc:
        raise BadInput.one(str(capture), "", f"cannot read: {exc.strerror or exc}") from None
    sample = sample_cases(read.records, cases=cases, seed=seed, assume_pool=assume_pool)
    return sample, read


def write_suite(sample: Sample, path: Path) -> str:
    """Write the sample as a suite file at ``path`` (atomically); its sha256.

    :raises BadInput: nothing to write.
    :raises OSError: the file cannot be written.
    """
    if not sample.lines:
        raise BadInput.one(str(path), "", "no usable case to write")
    data = suite_bytes(sample)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return hashlib.sha256(data).hexdigest()


def sample_day(
    capture: Path,
    *,
    since: datetime,
    until: datetime,
    cases: int,
    seed: int,
    out: Path | None,
    assume_pool: str | None = None,
) -> SampleReport:
    """Read the capture from ``since`` to ``until``, sample it, and write the suite to
    ``out`` (None: do not write); the report says what was kept and dropped.

    :raises BadInput: the capture directory does not exist or cannot be listed.
    """
    sample, read = read_and_sample(
        capture, since=since, until=until, cases=cases, seed=seed, assume_pool=assume_pool
    )
    written = sha = None
    if out is not None and sample.lines:
        sha = write_suite(sample, out)
        written = str(out)
    return SampleReport(
        kept=sample.kept,
        dropped=sample.dropped,
        by_tool=sample.by_tool,
        available=sample.available,
        problems=tuple(str(p) for p in read.problems),
        files=read.files,
        out=written,
        sha256=sha,
    )


def _case_of(
    record: Captured, assume_pool: str | None, max_bytes: int
) -> tuple[dict[str, Any] | None, str]:
    """The suite case a record makes, or None and why not."""
    status = record.status_code
    if status is None or not 200 <= status < 300 or record.answer is None:
        return None, "error status"
    pool = record.pool or assume_pool
    if pool is None:
        return None, "pool unknown"
    if pool != "stable":
        return None, "served by canary"
    tools = record.request.get("tools")
    messages = record.request.get("messages")
    if not isinstance(tools, list) or not tools:
        return None, "no tool call"
    try:
        calls = record.answer["choices"][0]["message"].get("tool_calls")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None, "unparseable"
    if not calls:
        return None, "no tool call"
    try:
        function = calls[0]["function"]
        name = function["name"]
        arguments = json.loads(function["arguments"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None, "unparseable"
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None, "unparseable"
    if record.size > max_bytes:
        return None, "over size"
    asked = {"messages": messages, "tools": tools}
    digest = hashlib.sha256(
        json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    case = {
        "id": f"live-{digest[:16]}",
        "messages": messages,
        "tools": tools,
        "expected": {"name": name, "arguments": arguments},
        "tags": [name],
        "meta": {
            "custom_id": record.custom_id,
            "session": record.session,
            "request_sha256": digest,
            "captured_at": None if record.at is None else record.at.isoformat(),
        },
    }
    try:
        parse_suite((json.dumps(case) + "\n").encode(), record.where)
    except BadInput:
        return None, "not a valid case"
    return case, ""


def _water_fill(available: dict[str, int], budget: int) -> dict[str, int]:
    """Share ``budget`` equally among the tools, none taking more than it has."""
    quota = dict.fromkeys(available, 0)
    left = budget
    open_tools = sorted(t for t, n in available.items() if n > 0)
    while left > 0 and open_tools:
        share, extra = divmod(left, len(open_tools))
        given = 0
        still_open = []
        for i, tool in enumerate(open_tools):
            want = share + (1 if i < extra else 0)
            take = min(want, available[tool] - quota[tool])
            quota[tool] += take
            given += take
            if quota[tool] < available[tool]:
                still_open.append(tool)
        left -= given
        if given == 0:
            break
        open_tools = still_open
    return quota


# --- before a rollout: `rolloutctl plan check` ----------------------------------------------

CAPTURE = "captured cases"
"""The "signal" of a suite gate's ``sampled`` source in the preflight: usable captured cases."""


def check_captures(plan: Plan, now: datetime) -> list[Check]:
    """For every suite gate with a ``sampled`` source: does the capture hold enough usable
    cases over the gate's window before ``now``? *ok* at ``min_cases`` or more, *no data
    yet* below (traffic may come), *absent* when the directory does not exist. Only counts
    are reported, never what was captured."""
    first = first_step_gates(plan)
    checks = []
    for name, gate in plan.gates.items():
        if not isinstance(gate, SuiteGate) or gate.sampled is None:
            continue
        sampled = gate.sampled
        capture = Path(sampled.capture)
        try:
            sample, read = read_and_sample(
                capture, since=now - sampled.window, until=now, cases=sampled.cases, seed=0
            )
        except BadInput as exc:
            reason = "; ".join(p.message for p in exc.problems)
            checks.append(
                Check(
                    name,
                    CAPTURE,
                    "stable",
                    "absent",
                    None,
                    None,
                    str(capture),
                    reason,
                    name in first,
                )
            )
            continue
        usable = sum(sample.available.values())
        found: Found = "ok" if usable >= sampled.min_cases else "no data yet"
        why = (
            f"{usable} usable of {len(read.records)} captured in the last "
            f"{format_duration(sampled.window)} (a run samples {sampled.cases}, needs "
            f"{sampled.min_cases})"
        )
        if read.problems:
            why += f"; {len(read.problems)} unreadable line(s)"
        checks.append(
            Check(
                name,
                CAPTURE,
                "stable",
                found,
                float(usable),
                len(read.records),
                str(capture),
                why,
                name in first,
            )
        )
    return checks
