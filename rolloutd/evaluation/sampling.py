"""A day of captured traffic as a suite: the stable pool's answers are the reference.

``sample_cases`` keeps the captured requests that offered tools and that the *stable* pool
answered with a tool call: that call (its name and parsed arguments) becomes the case's
``expected``, so a replay to each pool is scored against what the serving build did. Every
other request is dropped, counted by reason:

- ``error status``: the answer was not a 2xx (or the request failed without an answer);
- ``served by canary``: the canary's answer is what is being judged, not a reference;
- ``pool unknown``: the capture does not say which pool answered, or names neither pool
  (``assume_pool`` says it for lines that do not say);
- ``no tool call``: no tools offered, or the answer called none;
- ``unparseable``: a 2xx whose body is not a chat completion, or whose first tool call's
  arguments are not a JSON object;
- ``not a valid case``: the request or the answer fails the suite's own checks (e.g. the
  stable answer names a tool not offered, or breaks the tool's schema);
- ``over size``: the two lines hold more than ``max_case_bytes``;
- ``duplicate``: the same messages and tools as a request kept before (the sha256 of their
  canonical JSON, which is also the case's ``meta.request_sha256`` and names its id);
- ``not sampled``: over the budget of ``cases``.

Each case's ``tags`` are its tool's name and its ``meta`` says where it came from:
``custom_id``, ``session`` (the session id's sha256, as captured), ``request_sha256`` and
``captured_at``, never anything that was not already in the capture.

**Stratified by tool.** The budget is shared equally among the tools, each taking at most
what it has, the rest shared again among the tools that have more (water-filling): a tool
called twice a day keeps both calls, and the common tools split the remainder, so each tool
has as many cases as the budget allows for its own per-field test. Equal shares rather than
shares of the traffic because the gates judge each field of each tool: a tool at 1% of the
traffic would get 3 of 300 cases, too few to judge it. Within a tool the cases are drawn
with a generator seeded by ``seed`` from the tool's cases in the order of their ids (which
hash their content): the same capture and seed give the same suite, and a hand-written
capture of the same requests gives the same suite as the gateway's.

``write_suite`` writes the file atomically (a temporary file renamed over it, synced first),
mode ``0640`` less the umask: it holds captured prompts, like the capture.
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

from rolloutd.core.durations import format_duration
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.errors import BadInput
from rolloutd.evaluation.capture import Captured, CaptureRead, read_capture
from rolloutd.evaluation.suite import Suite, parse_suite
from rolloutd.metrics.preflight import Check, Found, first_step_gates

MAX_CASE_BYTES = 1024 * 1024
"""A request and its answer taking more than this are dropped as ``over size``."""
SUITE_FILE_MODE = 0o640
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
    """Lines that could not be read, as ``file:line: field: what`` (the first
    :data:`~rolloutd.evaluation.capture.MAX_PROBLEMS`)."""
    files: tuple[str, ...]
    out: str | None
    sha256: str | None
    unreported: int = 0
    """Problems past those listed, counted only."""

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
            "unreported_problems": self.unreported,
        }


def sample_cases(
    records: Sequence[Captured],
    *,
    cases: int,
    seed: int,
    assume_pool: str | None = None,
    max_case_bytes: int = MAX_CASE_BYTES,
) -> Sample:
    """Up to ``cases`` suite cases from ``records``, stratified by tool (module docstring).

    :raises ValueError: ``cases`` below 1, or ``assume_pool`` neither stable nor canary.
    """
    if cases < 1:
        raise ValueError(f"cases must be at least 1, not {cases}")
    if assume_pool not in (None, "stable", "canary"):
        raise ValueError(f"assume_pool must be stable or canary, not {assume_pool!r}")
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
    return b"".join(_line_bytes(line) for line in sample.lines)


def _line_bytes(case: dict[str, Any]) -> bytes:
    try:
        return (json.dumps(case, ensure_ascii=False, sort_keys=True) + "\n").encode()
    except UnicodeEncodeError:
        # A lone surrogate (JSON allows "\ud800") is no UTF-8: escaped, the line stays JSON.
        return (json.dumps(case, sort_keys=True) + "\n").encode()


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
    if not path.parent.exists():
        path.parent.mkdir(parents=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            # Synced before the rename: a crash then leaves the old file or the whole new one.
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, SUITE_FILE_MODE & ~umask)
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
    ``out`` (None: do not write; nothing is written either when no case was kept); the
    report says what was kept and dropped, why, and which lines could not be read.

    :raises BadInput: the capture directory does not exist or cannot be listed.
    :raises ValueError: ``cases`` below 1, or an ``assume_pool`` other than stable or canary.
    :raises OSError: the suite cannot be written to ``out``.
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
        unreported=read.unreported,
    )


def _case_of(
    record: Captured, assume_pool: str | None, max_bytes: int
) -> tuple[dict[str, Any] | None, str]:
    """The suite case a record makes, or None and why not."""
    status = record.status_code
    if status is None or not 200 <= status < 300:
        return None, "error status"
    pool = record.pool or assume_pool
    if pool == "canary":
        return None, "served by canary"
    if pool != "stable":
        return None, "pool unknown"
    tools = record.request.get("tools")
    if not isinstance(tools, list) or not tools:
        return None, "no tool call"
    try:
        called = _first_call(record.answer)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RecursionError):
        return None, "unparseable"
    if called is None:
        return None, "no tool call"
    name, arguments = called
    if record.size > max_bytes:
        return None, "over size"
    messages = record.request.get("messages")
    try:
        asked = json.dumps(
            {"messages": messages, "tools": tools},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
    except RecursionError:
        return None, "unparseable"
    digest = hashlib.sha256(asked.encode("utf-8", "surrogatepass")).hexdigest()
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
        parse_suite(_line_bytes(case), record.where)
    except (BadInput, RecursionError):
        return None, "not a valid case"
    return case, ""


def _first_call(answer: dict[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    """The name and parsed arguments of the answer's first tool call; None when it made none.

    :raises ValueError: (or a lookup error) the answer is no chat completion, or the call's
        arguments are not a JSON object.
    """
    if answer is None:
        raise ValueError("no answer body")
    calls = answer["choices"][0]["message"].get("tool_calls")
    if not calls:
        return None
    function = calls[0]["function"]
    name, arguments = function["name"], json.loads(function["arguments"])
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ValueError("not a named call with an object of arguments")
    return name, arguments


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
