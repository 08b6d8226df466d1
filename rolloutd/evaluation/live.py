"""Live traffic as a run's cases: sampled once per job, and kept in the database with it.

A suite gate with ``sampled`` replays what the agent gateway captured: at its first attempt a
job samples the capture over the ``window`` before the job was due
(:func:`rolloutd.evaluation.sampling.read_and_sample`, seeded by the job's name) and keeps the
sampled suite in Postgres with the job. Every later attempt, on this host or another after a
takeover, reads the same cases back: the daemon has no state directory. The same window and
seed give the same suite anyway, but only as long as the capture files stay where they were.

A kept suite is at most :data:`MAX_SAMPLED_BYTES` (the suite reader's own bound; stored
zlib-compressed): a sample over it is drawn again, from the same records and seed, with
proportionally fewer cases. The reference deployment's cases (~6,000-token prompts, some
25 KB each) fit about 2,500, eight times the default 300.

A sample with fewer usable cases than ``min_cases``, or a capture directory that is missing
or unreadable, makes the run *inconclusive*; the reason names the directory and the counts
(kept, dropped by reason), never a captured line's content.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rolloutd.core.durations import format_duration
from rolloutd.core.plan import SampledSource
from rolloutd.errors import BadInput
from rolloutd.evaluation import sampling
from rolloutd.evaluation.capture import CaptureRead
from rolloutd.evaluation.suite import MAX_SUITE_BYTES, Suite, parse_suite
from rolloutd.store import suite_jobs
from rolloutd.store.suite_models import SuiteSample

if TYPE_CHECKING:
    from rolloutd.store.types import Session

MAX_SAMPLED_BYTES = MAX_SUITE_BYTES
MAX_PROBLEMS_KEPT = 20
# A sample over the bound is drawn again, smaller, at most this many times.
_REDRAWS = 3


@dataclass(frozen=True)
class Unusable:
    """Why the live traffic gave no suite to run, and what the sample found."""

    reason: str
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Drawn:
    data: bytes | None
    report: dict[str, Any]
    reason: str | None


def seed_of(name: str) -> int:
    """A sample's seed from the name of what samples (a job's name): each run of a gate draws
    its own cases, and every attempt of one run the same."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") & 0x7FFF_FFFF


def live_suite(
    read: Callable[[], AbstractContextManager[Session]],
    write: Callable[[], AbstractContextManager[Session]],
    *,
    sampled: SampledSource,
    capture: Path,
    until: datetime,
    seed: int,
    job: int | None,
    clock: Callable[[], datetime],
) -> Suite | Unusable:
    """The run's live suite: the one job ``job`` kept, else a sample of the ``window`` up to
    ``until`` drawn with ``seed``, kept with the job (through ``write``, which the job's claim
    fences) before any case is asked. Without a job (an ad-hoc run) nothing is kept.
    """
    if job is not None:
        with read() as session:
            kept = suite_jobs.sample_of(session, job)
            if kept is not None:
                return _restored(kept, capture)
    since = until - sampled.window
    drawn = _draw(capture, sampled, since=since, until=until, seed=seed)
    if job is not None:
        row = SuiteSample(
            job_id=job,
            capture=str(capture),
            since=since,
            until=until,
            seed=seed,
            kept=int(drawn.report.get("kept", 0)),
            report=drawn.report,
            suite_sha256=None if drawn.data is None else hashlib.sha256(drawn.data).hexdigest(),
            suite=None if drawn.data is None else zlib.compress(drawn.data),
            size=0 if drawn.data is None else len(drawn.data),
            reason=drawn.reason,
            sampled_at=clock(),
        )
        with write() as session:
            suite_jobs.keep_sample(session, row)
    if drawn.data is None:
        return Unusable(drawn.reason or f"live sample: {capture}: nothing sampled", drawn.report)
    return _parsed(drawn.data, capture, drawn.report)


def _restored(row: SuiteSample, capture: Path) -> Suite | Unusable:
    if row.suite is None:
        return Unusable(row.reason or f"live sample: {capture}: nothing sampled", row.report)
    return _parsed(zlib.decompress(row.suite), capture, row.report)


def _parsed(data: bytes, capture: Path, report: dict[str, Any]) -> Suite | Unusable:
    try:
        return parse_suite(data, str(capture))
    except BadInput as exc:
        # The problems may quote a captured value: count them, never show them.
        return Unusable(
            f"live sample: {capture}: the sampled suite failed {len(exc.problems)} checks", report
        )


def _draw(
    capture: Path, sampled: SampledSource, *, since: datetime, until: datetime, seed: int
) -> _Drawn:
    """Sample the capture, fewer cases while the suite is over :data:`MAX_SAMPLED_BYTES`."""
    try:
        sample, read = sampling.read_and_sample(
            capture, since=since, until=until, cases=sampled.cases, seed=seed
        )
    except BadInput as exc:
        return _Drawn(None, {}, f"live sample: {exc}")
    problems = read.problem_count
    report = _report(sample, read, problems)
    if sample.kept < sampled.min_cases:
        return _Drawn(None, report, _too_few(capture, sampled, sample, problems))
    data = sampling.suite_bytes(sample)
    for _ in range(_REDRAWS):
        if len(data) <= MAX_SAMPLED_BYTES:
            break
        # Drawn again from the same records and seed, so still stratified by tool.
        fewer = int(sample.kept * MAX_SAMPLED_BYTES / len(data) * 0.95)
        if fewer < sampled.min_cases:
            break
        sample = sampling.sample_cases(read.records, cases=fewer, seed=seed)
        data = sampling.suite_bytes(sample)
        report = _report(sample, read, problems)
    if len(data) > MAX_SAMPLED_BYTES:
        reason = (
            f"live sample: {capture}: {sample.kept} case(s) take {_size(len(data))}, more than "
            f"the {_size(MAX_SAMPLED_BYTES)} a run keeps, and fewer than min_cases "
            f"{sampled.min_cases} would fit"
        )
        return _Drawn(None, report, reason)
    return _Drawn(data, report, None)


def _report(sample: sampling.Sample, read: CaptureRead, problems: int) -> dict[str, Any]:
    """What is kept of a sample besides its cases: counts, tools and ``file:line`` problems,
    no content."""
    return {
        "kept": sample.kept,
        "dropped": dict(sample.dropped),
        "by_tool": dict(sample.by_tool),
        "available": dict(sample.available),
        "problems": problems,
        "first_problems": [str(p) for p in read.problems[:MAX_PROBLEMS_KEPT]],
        "files": len(read.files),
    }


def _too_few(capture: Path, sampled: SampledSource, sample: sampling.Sample, problems: int) -> str:
    dropped = ", ".join(f"{n} {why}" for why, n in sample.dropped.items()) or "none"
    unread = f"; {problems} unreadable line(s)" if problems else ""
    return (
        f"live sample: {capture}: {sample.kept} usable captured case(s) in the last "
        f"{format_duration(sampled.window)}, fewer than min_cases {sampled.min_cases} "
        f"(dropped: {dropped}{unread})"
    )


def _size(count: int) -> str:
    return f"{count / 2**20:.0f} MiB" if count >= 2**20 else f"{count / 2**10:.0f} KiB"
