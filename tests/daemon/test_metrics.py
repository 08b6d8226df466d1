"""rolloutd's own ``/metrics``: what a scrape costs the database as the rollouts grow."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rolloutd.daemon.metrics import DaemonMetrics
from tests.reconcile.test_reconcile import Harness
from tests.store.seed import copy_rollout, statements

if TYPE_CHECKING:
    from conftest import StoreHandle

GATE_FAMILIES = (
    "rolloutd_gate_value",
    "rolloutd_gate_verdict",
    "rolloutd_gate_evaluated_timestamp_seconds",
)


def _scrape(h: Harness) -> tuple[int, dict[str, set[tuple[Any, ...]]]]:
    """The statements one scrape ran, and each rollout's gate samples (labels but the
    rollout's, and the value)."""
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    with statements(h.store.engine) as ran:
        body, _ = metrics.exposition()
    gates: dict[str, set[tuple[Any, ...]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name in GATE_FAMILIES:
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "rollout"))
                gates.setdefault(s.labels["rollout"], set()).add((s.name, labels, s.value))
    return len(ran), gates


def test_a_scrape_reads_the_newest_verdicts_in_statements_that_do_not_grow_with_rollouts(
    store: StoreHandle,
) -> None:
    """A scrape reports each rollout's newest verdict of each gate; with eleven rollouts it
    runs as many statements as with one (it ran two a rollout: 2 s a scrape at 1,000), and a
    rollout with no evaluation yet has no gate samples, rather than borrowed ones."""
    h = Harness(store)
    assert h.tick() == "running"
    assert h.tick(seconds=30) == "running"
    assert h.tick(seconds=30) == "running"
    alone, before = _scrape(h)
    own = before[str(h.rollout_id)]
    verdicts = {s for s in own if s[0] == "rolloutd_gate_verdict" and s[2] == 1.0}
    assert {dict(s[1])["gate"] for s in verdicts} == {"timeouts", "oom"}

    copies = copy_rollout(h.store.engine, h.rollout_id, 10, with_evaluations=True)
    (bare,) = copy_rollout(h.store.engine, h.rollout_id, 1, with_evaluations=False, tag="bare")
    many, after = _scrape(h)
    assert many == alone
    assert after[str(h.rollout_id)] == own
    for rollout_id in copies:
        assert after[str(rollout_id)] == own
    assert str(bare) not in after


def test_a_scrape_builds_no_plan_model(store: StoreHandle, monkeypatch: Any) -> None:
    """A scrape reads each rollout's stored outline, never its plan: with more rollouts of
    distinct plans than the plan cache holds, building plans made one scrape of 10,000 cost
    minutes of CPU. The state, step, weight and rollback-cause series stay as they were."""
    import rolloutd.operations

    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    copy_rollout(h.store.engine, h.rollout_id, 3, with_evaluations=True)
    before = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    expected, _ = before.exposition()

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a scrape built a plan model")

    monkeypatch.setattr(rolloutd.operations, "_plans", {})
    monkeypatch.setattr(rolloutd.operations, "parse_plan", refuse)
    monkeypatch.setattr(rolloutd.operations.Plan, "model_validate", refuse)
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    body, _ = metrics.exposition()
    assert b"rolloutd_store_up 1.0" in body
    rollout_series = [
        line
        for line in body.decode().splitlines()
        if line.startswith(("rolloutd_rollout_", "rolloutd_rollbacks", "rolloutd_gate_"))
    ]
    assert rollout_series and rollout_series == [
        line
        for line in expected.decode().splitlines()
        if line.startswith(("rolloutd_rollout_", "rolloutd_rollbacks", "rolloutd_gate_"))
    ]


def test_a_scrape_builds_no_sample_object_per_rollout(store: StoreHandle, monkeypatch: Any) -> None:
    """The series of the rollouts are written as text, not built as prometheus_client
    samples: at 10,000 rollouts, 610,000 sample objects and their formatting cost 6.5 s of
    CPU and 370 MB a scrape in the leader's process. With eleven rollouts a scrape builds
    as many sample objects as with one (the daemon's own counters and histograms)."""
    import prometheus_client.metrics_core
    from prometheus_client.samples import Sample

    built = [0]

    def counted(*args: Any, **kwargs: Any) -> Sample:
        built[0] += 1
        return Sample(*args, **kwargs)

    monkeypatch.setattr(prometheus_client.metrics_core, "Sample", counted)
    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    built[0] = 0
    alone, _ = metrics.exposition()
    one = built[0]
    copy_rollout(h.store.engine, h.rollout_id, 10, with_evaluations=True)
    built[0] = 0
    many, _ = metrics.exposition()
    assert many.count(b"rolloutd_gate_verdict{") == 11 * alone.count(b"rolloutd_gate_verdict{")
    assert built[0] == one


def test_a_scrape_reads_first_and_writes_a_piece_at_a_time(
    store: StoreHandle, monkeypatch: Any
) -> None:
    """The database is read before ``chunks()`` returns, in one transaction (a rollout started
    afterwards is in the next scrape, not half in this one); the text is then written a piece
    of at most ``PIECE_LINES`` lines at a time, each family built only when the one before it
    was sent, so a scrape of 10,000 rollouts never holds its ~60 MB of lines at once."""
    from rolloutd.daemon import metrics as module

    monkeypatch.setattr(module, "PIECE_LINES", 3)
    built: list[str] = []
    init = module._Family.__init__

    def tracked_init(self: Any, *args: Any) -> None:
        init(self, *args)
        built.append(self.sample)

    monkeypatch.setattr(module._Family, "__init__", tracked_init)
    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    copy_rollout(h.store.engine, h.rollout_id, 3, with_evaluations=True)
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    chunks, _ = metrics.chunks()
    copy_rollout(h.store.engine, h.rollout_id, 1, with_evaluations=True, tag="later")
    first = next(chunks)  # the process's own series, counted in memory
    assert b"rolloutd_ticks_total" in first and "rolloutd_rollout_state" not in built
    pieces = [first, *chunks]
    store_pieces = [p for p in pieces[1:] if not p.startswith(b"# HELP")]
    assert store_pieces and all(p.count(b"\n") <= 3 for p in store_pieces)
    assert len(built) > 10 and len(pieces) > len(built)
    body = b"".join(pieces)
    assert body.count(b"rolloutd_rollout_step{") == 4
    whole, _ = metrics.exposition()
    assert whole.count(b"rolloutd_rollout_step{") == 5


def test_the_text_is_the_text_format_prometheus_client_writes(store: StoreHandle) -> None:
    """Written by hand, the text reads back and is written again by prometheus_client's own
    parser and writer to the same bytes: label names sorted, values escaped (a name with a
    quote, a backslash and a newline), numbers as Go writes them, counters with ``_total``."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import Collector
    from sqlalchemy import text

    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    (odd,) = copy_rollout(h.store.engine, h.rollout_id, 1, with_evaluations=True)
    with h.store.engine.begin() as connection:
        connection.execute(
            text("UPDATE rollouts SET name = :name, service = :service WHERE id = :id"),
            {"name": 'say "hi"\\now\nplease', "service": "back\\slash", "id": odd},
        )
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    body, _ = metrics.exposition()
    families = list(text_string_to_metric_families(body.decode()))

    class Parsed(Collector):
        def collect(self) -> Any:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Parsed())
    assert generate_latest(registry) == body
    state = next(f for f in families if f.name == "rolloutd_rollout_state")
    names = {s.labels["name"] for s in state.samples if s.labels["rollout"] == str(odd)}
    assert names == {'say "hi"\\now\nplease'}
    assert b'name="say \\"hi\\"\\\\now\\nplease"' in body


def test_a_scrape_reads_again_only_the_rollouts_whose_progress_was_written(
    store: StoreHandle,
) -> None:
    """The second scrape of four rollouts reads no rollout's row but the one whose tick wrote
    its progress since (its revision moved), and shows its new weight; every rollout's gates
    are read afresh; a rollout no longer visible is dropped from what is kept."""
    from sqlalchemy import text

    h = Harness(store)
    h.tick()
    copies = copy_rollout(h.store.engine, h.rollout_id, 3, with_evaluations=True)
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)

    def scrape() -> tuple[list[str], bytes]:
        with statements(h.store.engine) as ran:
            body, _ = metrics.exposition()
        return [sql for sql in ran if "plan_outline" in sql], body

    def weight(body: bytes, rollout_id: int) -> float:
        family = next(
            f
            for f in text_string_to_metric_families(body.decode())
            if f.name == "rolloutd_rollout_canary_weight_percent"
        )
        return next(s.value for s in family.samples if s.labels["rollout"] == str(rollout_id))

    first, body = scrape()
    assert len(first) == 1 and weight(body, h.rollout_id) == 5.0
    again, _ = scrape()
    assert again == []
    assert h.tick(seconds=5) == "running"  # the weight is verified: progress written
    assert h.tick(hours=48) == "running"  # the bake is over: the next step, 25%
    changed, body = scrape()
    assert len(changed) == 1 and weight(body, h.rollout_id) == 25.0
    assert {weight(body, c) for c in copies} == {5.0}
    with h.store.engine.begin() as connection:
        connection.execute(
            text("UPDATE rollouts SET active = false, updated_at = :old WHERE id = :id"),
            {"old": h.clock() - timedelta(days=1), "id": copies[0]},
        )
    _, body = scrape()
    assert f'rollout="{copies[0]}"'.encode() not in body
    assert copies[0] not in metrics.store._shown


def test_a_scrape_gives_way_after_each_chunk_read_and_each_piece_written(
    store: StoreHandle, monkeypatch: Any
) -> None:
    """While ticks run, a scrape sleeps twice the CPU time each piece of its work took (the
    ticks share the interpreter lock with it), after each chunk of rollouts it reads and
    before each piece of text is sent; the text is the same as without pacing. While no
    tick runs, it does not sleep."""
    from rolloutd.daemon import metrics as module

    monkeypatch.setattr(module, "PIECE_LINES", 3)
    monkeypatch.setattr(module, "_CHUNK", 2)
    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    copy_rollout(h.store.engine, h.rollout_id, 3, with_evaluations=True)
    cpu = [0.0]
    slept: list[float] = []
    made: list[str] = []

    def fake_cpu() -> float:
        cpu[0] += 0.001  # every look at the clock: a millisecond of work since the last
        return cpu[0]

    def pacer() -> module.GiveWay:
        made.append("scrape")
        return module.GiveWay(lambda: True, cpu=fake_cpu, sleep=slept.append)

    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    metrics.store.give_way = pacer
    chunks, _ = metrics.chunks()
    read = len(slept)
    assert read == 2 + 2  # 4 rollouts, 2 a chunk: once after their rows, once after their gates
    pieces = [next(chunks)]  # the process's own series: not paced
    for piece in chunks:
        assert len(slept) == read + len(pieces)  # the piece was paced before it was sent
        pieces.append(piece)
    assert made == ["scrape"] and len(pieces) > 20
    assert slept == pytest.approx([0.002] * len(slept))  # twice the 1 ms each piece took
    metrics.store.give_way = lambda: module.GiveWay(lambda: False)
    unpaced, _ = metrics.exposition()
    assert b"".join(pieces) == unpaced
    count = len(slept)
    module.GiveWay(lambda: True, cpu=lambda: 5.0, sleep=slept.append)()  # no CPU spent: no sleep
    module.GiveWay(lambda: False, cpu=fake_cpu, sleep=slept.append)()  # no tick runs: none
    assert len(slept) == count


def test_failed_attempts_are_shown_of_the_visible_rollouts_only(store: StoreHandle) -> None:
    """A chunk's failed attempts are read by the range of its rollout ids and the condition
    that makes a rollout visible: a rollout ended a day ago, whose id lies among visible
    ones, has its attempts left out with it. They are written in order."""
    from sqlalchemy import text

    h = Harness(store)
    h.tick()
    h.tick(seconds=30)
    copies = copy_rollout(h.store.engine, h.rollout_id, 3, with_evaluations=True)
    columns = "key, kind, payload, status, attempts, last_error, created_at"
    with h.store.engine.begin() as connection:
        for rollout_id in copies:
            connection.execute(
                text(
                    f"INSERT INTO actions (rollout_id, {columns})"
                    f" SELECT :new, key, 'send_alert', payload, 'pending', 3, 'refused',"
                    " created_at FROM actions WHERE rollout_id = :id"
                ),
                {"new": rollout_id, "id": h.rollout_id},
            )
        connection.execute(
            text("UPDATE rollouts SET active = false, updated_at = :old WHERE id = :id"),
            {"old": h.clock() - timedelta(days=1), "id": copies[1]},
        )
    metrics = DaemonMetrics(h.store.sessions, instance="a", wall=h.clock, leading=lambda: 1)
    body, _ = metrics.exposition()
    family = next(
        f
        for f in text_string_to_metric_families(body.decode())
        if f.name == "rolloutd_action_failures"
    )
    failed = {
        s.labels["rollout"]: s.value for s in family.samples if s.labels["kind"] == "send_alert"
    }
    assert set(failed) == {str(copies[0]), str(copies[2])}
    assert all(value > 0 for value in failed.values())
    shown = [(int(s.labels["rollout"]), s.labels["kind"]) for s in family.samples]
    assert shown == sorted(shown)  # by rollout and kind: the same order every scrape
