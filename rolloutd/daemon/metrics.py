"""rolloutd's own metrics, for Prometheus: what each rollout is doing, and is the daemon well.

Served as ``/metrics`` beside ``/healthz``. Two kinds:

* read from the database at scrape time (every instance, standbys included, reports the same
  values, so a dashboard or an alert keeps working whichever instance leads): per rollout its
  state, step and canary weight, each gate's newest value and verdict, failed action attempts,
  its rollback and holds by cause and its extended bakes, and the alert outbox's depth and
  oldest age;
* counted in this process: ticks and their duration, alert delivery outcomes, and whether
  this instance leads.

A scrape gives way to the ticks (:class:`GiveWay`): at 10,000 rollouts it takes over a second
of the interpreter, and the leader's one thread for local batches, sharing the interpreter
lock with it, fell seconds behind the rollouts' due times during every scrape.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, get_args

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from rolloutd.core.actions import Verdict
from rolloutd.core.machine import rollback_kind
from rolloutd.core.progress import Progress, RollbackKind, State, rollback_outcome
from rolloutd.errors import RolloutdError
from rolloutd.reconcile import NotLeading
from rolloutd.store import exposition
from rolloutd.store.db import transaction
from rolloutd.store.errors import StoreError
from rolloutd.store.evaluations import GateLatest
from rolloutd.store.outbox import OutboxStats, outbox_stats
from rolloutd.store.reads import RolloutRow
from rolloutd.views import outline_of

if TYPE_CHECKING:
    from rolloutd.store.types import Session, Sessions

log = structlog.get_logger("rolloutd.metrics")

# Ended rollouts stay on the dashboard this long, so "rolled back" is seen, not just vanishes.
ENDED_VISIBLE_FOR = timedelta(hours=1)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ROLLBACK_CAUSES: tuple[RollbackKind, ...] = get_args(RollbackKind)
HOLD_CAUSES = ("operator", "no_data")


class DaemonMetrics:
    """The registry behind ``/metrics`` and the counters the daemon updates."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        instance: str,
        wall: Callable[[], datetime],
        leading: Callable[[], int | None],
        round_trips: Callable[[], int] | None = None,
        ticks_running: Callable[[], bool] = lambda: False,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ticks = Counter(
            "rolloutd_ticks",
            "Rollout ticks run by this instance, by outcome (ok, not_leading, error).",
            ["outcome"],
            registry=self.registry,
        )
        self.tick_seconds = Histogram(
            "rolloutd_tick_duration_seconds",
            "Wall time of one batch of rollout ticks (one transaction) on this instance.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.tick_lag = Histogram(
            "rolloutd_tick_lag_seconds",
            "From a tick's due time to its start: how far the leader runs behind.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.ticks_missed = Counter(
            "rolloutd_ticks_missed",
            "Due ticks not run because the rollout's previous tick still ran or the leader "
            "was too late to run them at all.",
            registry=self.registry,
        )
        self.deliveries = Counter(
            "rolloutd_alert_deliveries",
            "Attempts to post an alert to Slack, by outcome "
            "(sent, rate_limited, retry, failed, unconfigured).",
            ["outcome"],
            registry=self.registry,
        )
        self.registry.register(_LeaderCollector(instance, leading))
        if round_trips is not None:
            self.registry.register(_RoundTripCollector(round_trips))
        self.store = _StoreSeries(sessions, wall, lambda: GiveWay(ticks_running))

    @contextmanager
    def ticking(self, rollouts: int = 1) -> Iterator[None]:
        """Time one batch and count the ticks of its ``rollouts``; an exception is counted by
        its kind and passed on."""
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        except NotLeading:
            outcome = "not_leading"
            raise
        finally:
            self.tick_seconds.observe(time.perf_counter() - started)
            self.ticks.labels(outcome).inc(rollouts)

    def delivered(self, outcome: str) -> None:
        """Count one delivery attempt of the alert sender."""
        self.deliveries.labels(outcome).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text format Prometheus scrapes, whole, and its content type."""
        chunks, content_type = self.chunks()
        return b"".join(chunks), content_type

    def chunks(self) -> tuple[Iterator[bytes], str]:
        """The text format Prometheus scrapes, a piece at a time, and its content type: the
        database is read before this returns, each piece is written as the iterator is
        taken (``/metrics`` sends each as it comes)."""
        counted = generate_latest(self.registry)
        return itertools.chain([counted], self.store.texts()), CONTENT_TYPE_LATEST


class _LeaderCollector(Collector):
    def __init__(self, instance: str, leading: Callable[[], int | None]) -> None:
        self.instance = instance
        self.leading = leading

    def collect(self) -> Iterable[Metric]:
        epoch = self.leading()
        leader = GaugeMetricFamily(
            "rolloutd_leader",
            "1 while this instance holds the leader lease, else 0 (daemon: its instance name;"
            " not 'instance', which Prometheus sets to the scrape target).",
            labels=["daemon"],
        )
        leader.add_metric([self.instance], 1.0 if epoch is not None else 0.0)
        yield leader
        if epoch is not None:
            yield GaugeMetricFamily(
                "rolloutd_leader_epoch",
                "The fencing epoch of the lease this instance holds.",
                epoch,
            )


class _RoundTripCollector(Collector):
    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "rolloutd_store_round_trips",
            "Times this instance waited on the database: statements, BEGINs, COMMITs, "
            "ROLLBACKs and pre-pings.",
            value=self.count(),
        )


Samples = Iterable[tuple[str, str]]
"""A family's samples: the labels as written between the braces (empty: none), and the
value as :func:`_number` writes it."""

# A family's text is sent in pieces of this many lines.
PIECE_LINES = 2_000
# After each piece of its work a scrape waits this many times the CPU time the piece took.
GIVE_WAY = 2.0


class GiveWay:
    """Paces one scrape so that, while ticks run, it holds the interpreter lock at most a
    third of the time.

    The ticks share the lock with a scrape: while both compute, each gets about half of it,
    and a tick coming back from a database round trip waits out the scrape's switch interval
    first. At 10,000 rollouts a scrape takes 1.3-1.6 s of CPU (in-process, measured), and
    while it ran, the batches queued for the local thread grew to 38 and their lag to
    3.5 s (a 2 s goal). After each piece of its work (a chunk of rollouts read, a piece of
    text written) the scrape sleeps :data:`GIVE_WAY` times the CPU time its thread spent on
    it, if ticks are in flight (``ticks_running``): they then have the lock whenever they want it
    two thirds of the time, and a scrape takes longer only while they run. At 10,000
    rollouts (``bench/scale.py``'s leader) the lag p99 was 0.97 s with twice the CPU time,
    and 2.04 s with as long; scrapes took 7.0-8.7 s and 5.3-7.0 s when every piece slept,
    5.9-8.5 s when only those made while ticks ran did (twice).
    """

    def __init__(
        self,
        ticks_running: Callable[[], bool],
        ratio: float = GIVE_WAY,
        cpu: Callable[[], float] = time.thread_time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.ticks_running, self.ratio = ticks_running, ratio
        self.cpu, self.sleep = cpu, sleep
        self._mark = cpu()

    def __call__(self) -> None:
        """One piece of work is done: wait in proportion to its CPU time, while ticks run."""
        spent = self.cpu() - self._mark
        if spent > 0 and self.ticks_running():
            self.sleep(spent * self.ratio)
        self._mark = self.cpu()

    def paced(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        """``pieces``, giving way after each is made."""
        for piece in pieces:
            self()
            yield piece


class _Family:
    """One family of the text format Prometheus scrapes, its samples written as lines, a
    piece at a time as the scrape is sent.

    A scrape of 10,000 rollouts holds 610,000 samples. Built as prometheus_client families
    and formatted by ``generate_latest``, which checks and escapes every label name of every
    sample, they cost 6.5 s of CPU and 370 MB a scrape, in the leader's process. Here the
    caller writes a sample's labels as ``generate_latest`` would, names sorted and values
    escaped (:func:`_label`), and each rollout's own labels once for all its samples; the
    samples are drawn as the text is sent, so a scrape holds one piece of
    :data:`PIECE_LINES` lines, not its ~60 MB of text.
    """

    def __init__(self, name: str, kind: str, documentation: str, samples: Samples) -> None:
        self.sample = f"{name}_total" if kind == "counter" else name
        escaped = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.header = f"# HELP {self.sample} {escaped}\n# TYPE {self.sample} {kind}\n"
        self.samples = samples

    def pieces(self) -> Iterator[bytes]:
        """The family's text, :data:`PIECE_LINES` lines at a time."""
        lines = [self.header]
        for labels, value in self.samples:
            lines.append(
                f"{self.sample}{{{labels}}} {value}\n" if labels else f"{self.sample} {value}\n"
            )
            if len(lines) >= PIECE_LINES:
                yield "".join(lines).encode()
                lines.clear()
        if lines:
            yield "".join(lines).encode()


def _number(value: float) -> str:
    """A sample's value as the text format writes it (``1.0``, ``1.7e+09``, ``NaN``)."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


_HOT = ("0.0", "1.0")  # _number(0.0) and _number(1.0): a one-hot family's values


@functools.lru_cache(maxsize=4_096)
def _gate_labels(gate: str, role: str) -> str:
    """A gate's labels but its rollout's, written once for all the rollouts with the gate."""
    return f"{_label('gate', gate)},{_label('role', role)}"


def _label(name: str, value: object) -> str:
    """``name="value"``, the value escaped as the text format wants."""
    text = str(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return f'{name}="{text}"'


class _StoreSeries:
    """The series read from the database on each scrape, written as text; a failed read
    reports ``rolloutd_store_up 0``."""

    def __init__(
        self,
        sessions: Sessions,
        wall: Callable[[], datetime],
        give_way: Callable[[], GiveWay],
    ) -> None:
        self.sessions = sessions
        self.wall = wall
        self.give_way = give_way
        """A scrape's pacer, made anew for each."""
        self._lock = threading.Lock()
        self._shown: dict[int, tuple[int, _Rollout]] = {}
        """What each rollout's row showed at the revision it was read at, kept for the next
        scrape: a rollout's row changes only when its progress is written (a revision), so
        a baking rollout's labels, state, step, weight and counts are not read and parsed
        again each scrape, only its gates' newest verdicts."""

    def texts(self) -> Iterator[bytes]:
        """The families' text, in order, in pieces. The database is read now, in one
        transaction; each piece is written only when the one before it has been taken, so a
        scrape holds the rollouts it read and one piece of lines, not all of them (at 10,000
        rollouts the families are some 60 MB of text). It gives way to the ticks after each
        chunk of rollouts read and each piece written (:class:`GiveWay`)."""
        give_way = self.give_way()
        try:
            with self._lock, transaction(self.sessions) as session:
                seen = self._read(session, self.wall(), give_way)
        except (RolloutdError, StoreError) as exc:
            log.warning("metrics: cannot read the database", error=str(exc).splitlines()[0])
            return _store_up(0).pieces()
        families = itertools.chain([_store_up(1)], _families(seen))
        return give_way.paced(itertools.chain.from_iterable(f.pieces() for f in families))

    def _read(self, session: Session, now: datetime, give_way: GiveWay) -> _Seen:
        """Everything a scrape shows, read in the caller's transaction: the rows of the
        rollouts whose revision moved since the last scrape, and every rollout's newest
        verdicts and failed attempts, a chunk of rollouts at a time."""
        since = now - ENDED_VISIBLE_FOR
        revisions = exposition.visible_revisions(session, since)
        kept = self._shown
        stale = [i for i, revision in revisions if i not in kept or kept[i][0] != revision]
        for ids in _chunks(stale):
            kept.update(_shown(session, exposition.rollout_rows(session, ids)))
            give_way()
        visible = {i for i, _ in revisions}
        for gone in [i for i in kept if i not in visible]:
            del kept[gone]
        rollouts: list[_Rollout] = []
        gates: list[tuple[str, GateLatest]] = []
        failures: list[tuple[int, str, int]] = []
        for ids in _chunks([i for i, _ in revisions]):
            shown = [kept[i][1] for i in ids]
            names = {i: r.gate_names for i, r in zip(ids, shown, strict=True)}
            newest = exposition.newest_verdicts(session, since, names, (ids[0], ids[-1]))
            for i, rollout in zip(ids, shown, strict=True):
                gates += (
                    (f"{_gate_labels(g, latest.role)},{rollout.id}", latest)
                    for g, latest in sorted(newest[i].items())
                )
            rollouts += shown
            failures += exposition.attempts_by_kind(session, since, (ids[0], ids[-1]))
            give_way()
        return _Seen(rollouts, gates, failures, outbox_stats(session), now)


# A scrape reads its rollouts this many at a time.
_CHUNK = 1_000


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _shown(session: Session, rows: list[tuple[int, RolloutRow]]) -> dict[int, tuple[int, _Rollout]]:
    """What each of ``rows`` shows, with the revision it was read at (its gates are read each
    scrape)."""
    # The outline stored with each rollout, not its plan: a scrape of 10,000 rollouts
    # must not build 10,000 plan models.
    counted: dict[int, dict[str, int]] = {row.id: {} for _, row in rows}
    events = exposition.events_of_kinds(session, list(counted), ("paused", "step_extended"))
    for owner, kind, detail, data in events:
        key = kind if kind == "step_extended" else _hold_cause(detail, data)
        counts = counted[owner]
        counts[key] = counts.get(key, 0) + 1
    shown = {}
    for revision, row in rows:
        outline, progress = outline_of(row), Progress.from_storage(row.progress)
        rollout_id = _label("rollout", row.id)
        environment, name = _label("environment", row.environment), _label("name", row.name)
        service = _label("service", row.service)
        ended = _label("rollback", rollback_outcome(progress) or "")
        facts = progress.rollback
        shown[row.id] = (
            revision,
            _Rollout(
                id=rollout_id,
                # Label names in sorted order, as generate_latest writes them.
                labels=f"{environment},{name},{rollout_id},{service}",
                owner=f"{environment},{rollout_id},{service}",
                before_state=f"{environment},{name},{ended},{rollout_id},{service},",
                state=outline.state(progress),
                step=_number(outline.step(progress)[0]),
                weight=_number(outline.weight(progress)),
                gate_names=tuple(outline.gates),
                started=None if facts is None else rollback_kind(outline.triggers, facts),
                counts=counted[row.id],
            ),
        )
    return shown


def _store_up(up: int) -> _Family:
    return _Family(
        "rolloutd_store_up",
        "gauge",
        "1 when this scrape could read rolloutd's database.",
        [("", _HOT[up])],
    )


class _Rollout(NamedTuple):
    """One rollout as a scrape writes it: its labels, written once, and its values."""

    id: str
    """its ``rollout`` label"""
    labels: str
    """environment, name, rollout, service: the labels of its state, step and weight"""
    owner: str
    """environment, rollout, service: the labels of its causes"""
    before_state: str
    """the labels of its state family before ``state``, its ``rollback`` among them"""
    state: State
    step: str
    weight: str
    gate_names: tuple[str, ...]
    """its plan's gates"""
    started: RollbackKind | None
    """why its rollback started (None: it has not)"""
    counts: dict[str, int]
    """its holds by cause and its extended bakes (``step_extended``)"""


class _Seen(NamedTuple):
    """What one scrape read from the database."""

    rollouts: list[_Rollout]
    gates: list[tuple[str, GateLatest]]
    """each gate's labels and its newest evaluation, by rollout and gate name"""
    failures: list[tuple[int, str, int]]
    outbox: OutboxStats
    now: datetime


def _families(seen: _Seen) -> Iterator[_Family]:
    """The families of one scrape, in order; each one's samples are drawn as it is sent."""
    rollouts = seen.rollouts
    states = [(candidate, _label("state", candidate.value)) for candidate in State]
    yield _Family(
        "rolloutd_rollout_state",
        "gauge",
        "1 for the rollout's current state, 0 for the others; rollback: how its rollback "
        "ended (verified, or traffic_only: the plan has no executor), empty before.",
        (
            (rollout.before_state + label, _HOT[candidate is rollout.state])
            for rollout in rollouts
            for candidate, label in states
        ),
    )
    yield _Family(
        "rolloutd_rollout_step",
        "gauge",
        "The rollout's current step (0-based).",
        ((rollout.labels, rollout.step) for rollout in rollouts),
    )
    yield _Family(
        "rolloutd_rollout_canary_weight_percent",
        "gauge",
        "The share of sessions the rollout intends for the canary.",
        ((rollout.labels, rollout.weight) for rollout in rollouts),
    )
    yield from _gate_families(seen.gates)
    yield _Family(
        "rolloutd_action_failures",
        "counter",
        "Failed attempts at the rollout's actions (set weights, alerts), by kind.",
        (
            (f"{_label('kind', kind)},{_label('rollout', owner)}", _number(attempts))
            for owner, kind, attempts in seen.failures
        ),
    )
    yield from _causes(rollouts)
    yield from _outbox(seen.outbox, seen.now)


def _gate_families(gates: list[tuple[str, GateLatest]]) -> Iterator[_Family]:
    yield _Family(
        "rolloutd_gate_value",
        "gauge",
        "The newest value of each gate of each rollout (absent while it has none).",
        ((labels, _number(latest.value)) for labels, latest in gates if latest.value is not None),
    )
    verdicts = [(candidate.value, _label("verdict", candidate.value)) for candidate in Verdict]
    yield _Family(
        "rolloutd_gate_verdict",
        "gauge",
        "1 for the gate's newest verdict, 0 for the others.",
        (
            (f"{labels},{label}", _HOT[latest.verdict == candidate])
            for labels, latest in gates
            for candidate, label in verdicts
        ),
    )
    yield _Family(
        "rolloutd_gate_evaluated_timestamp_seconds",
        "gauge",
        "When the gate was last evaluated (Unix time).",
        ((labels, _number(latest.evaluated_at.timestamp())) for labels, latest in gates),
    )


def _causes(rollouts: list[_Rollout]) -> Iterator[_Family]:
    """Rollbacks by cause (from the rollback facts), holds by cause and extended bakes (from
    the events). Every cause is reported, at 0 until it happens, so ``increase()`` sees the
    first one."""
    rollback_causes = [(cause, _label("cause", cause)) for cause in ROLLBACK_CAUSES]
    yield _Family(
        "rolloutd_rollbacks",
        "counter",
        "Rollbacks started, by cause: gate (a step gate's breach), trigger, abort, deadline "
        "(progress deadline) or no_data (a gate's on_no_data).",
        (
            (f"{label},{rollout.owner}", _HOT[cause == rollout.started])
            for rollout in rollouts
            for cause, label in rollback_causes
        ),
    )
    hold_causes = [(cause, _label("cause", cause)) for cause in HOLD_CAUSES]
    yield _Family(
        "rolloutd_holds",
        "counter",
        "Times the rollout was paused, by cause: operator, or no_data (inconclusive evaluations "
        "past the limit, or samples short after the extension).",
        (
            (f"{label},{rollout.owner}", _number(rollout.counts.get(held, 0)))
            for rollout in rollouts
            for held, label in hold_causes
        ),
    )
    yield _Family(
        "rolloutd_step_extensions",
        "counter",
        "Bakes extended because a gate had fewer samples than the step's min_samples.",
        ((rollout.owner, _number(rollout.counts.get("step_extended", 0))) for rollout in rollouts),
    )


def _hold_cause(detail: str, data: dict[str, Any] | None) -> str:
    """Why a rollout was paused; events written before the cause was stored say it in words
    (an operator's pause reads ``paused by NAME``, the machine's ``paused: WHY``)."""
    cause = (data or {}).get("cause")
    if isinstance(cause, str):
        return cause
    return "no_data" if detail.startswith("paused: ") else "operator"


def _outbox(stats: OutboxStats, now: datetime) -> Iterator[_Family]:
    age = 0.0
    if stats.oldest_pending_at is not None:
        age = max((now - stats.oldest_pending_at).total_seconds(), 0.0)
    found = [
        (
            "rolloutd_outbox_pending",
            "gauge",
            "Alert messages waiting to be delivered.",
            stats.pending,
        ),
        (
            "rolloutd_outbox_oldest_pending_age_seconds",
            "gauge",
            "Age of the oldest undelivered alert message (0 when none waits).",
            age,
        ),
        (
            "rolloutd_outbox_failed",
            "counter",
            "Alert messages given up (Slack refused them for good).",
            stats.failed,
        ),
        ("rolloutd_outbox_sent", "counter", "Alert messages Slack accepted.", stats.sent),
    ]
    for name, kind, documentation, value in found:
        yield _Family(name, kind, documentation, [("", _number(value))])
