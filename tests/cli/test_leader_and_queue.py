"""rolloutctl says when no rolloutd drives the rollouts, and queues a command once.

Commands are rows the leader acts on: with no daemon holding the lease they wait, and an
operator must know that rather than watch a rollout that nothing moves. An identical command
sent again while the first still waits (a retried script, a second operator) is not queued
twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rolloutd.core.progress import Progress
from rolloutd.store import lease, queries
from tests.cli import Ctl
from tests.deploy.helpers import pin_and_drill
from tests.plans import example_plan

if TYPE_CHECKING:
    from conftest import StoreHandle

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "plans" / "atlas-70b-maxseq8192.yaml"
TTL = timedelta(seconds=15)


@pytest.fixture
def ctl(bare_ctl: Ctl, store: StoreHandle, tmp_path: Path) -> Ctl:
    """rolloutctl on a database where the example plan may start."""
    with store.sessions.begin() as session:
        pin_and_drill(session, example_plan(), tmp_path / "artefacts")
    return bare_ctl


def lead(store: StoreHandle, holder: str, *, at: datetime) -> lease.Held:
    """``holder`` takes the leader lease at ``at``, as a daemon does."""
    with store.sessions.begin() as session:
        held = lease.acquire(session, holder=holder, ttl=TTL, now=at)
    assert held is not None
    return held


def move(store: StoreHandle, rollout_id: int, progress: Progress, state: str) -> None:
    """Give the rollout ``progress``, as the daemon would write it."""
    with store.sessions.begin() as session:
        queries.save_progress(
            session,
            queries.get_rollout(session, rollout_id),
            progress=progress.for_storage(),
            state=state,
            active=progress.ended is None,
            now=datetime.now(UTC),
        )


def test_status_and_list_say_that_no_rolloutd_has_ever_led(ctl: Ctl) -> None:
    """On a database no daemon has run on, status and list say so (stderr, so JSON stays
    whole); the JSON status carries the same fact."""
    rollout = ctl.json("start", str(EXAMPLE))["id"]
    for argv in (("status", str(rollout)), ("status",), ("list",)):
        code, _, err = ctl(*argv)
        assert code == 0
        assert "no rolloutd is leading (none has run on this database)" in err, argv
    view = ctl.json("status", str(rollout))
    assert view["leader"] == {"leading": False, "holder": None, "last_seen": None}


def test_status_names_the_last_leader_and_when_it_was_seen(ctl: Ctl, store: StoreHandle) -> None:
    """A daemon that stopped (its lease released) shows as last seen at its last renewal."""
    rollout = ctl.json("start", str(EXAMPLE))["id"]
    seen = datetime(2026, 12, 4, 9, 30, 5, tzinfo=UTC)
    held = lead(store, "ops-1:4242", at=seen)
    with store.sessions.begin() as session:
        assert lease.release(session, held, now=seen + timedelta(seconds=3))
    _, _, err = ctl("status", str(rollout))
    assert "no rolloutd is leading (last seen 2026-12-04 09:30:05 UTC, ops-1:4242)" in err
    view = ctl.json("status", str(rollout))
    assert view["leader"]["leading"] is False
    assert view["leader"]["holder"] == "ops-1:4242"
    assert datetime.fromisoformat(view["leader"]["last_seen"]) == seen


def test_nothing_is_said_while_a_rolloutd_leads(ctl: Ctl, store: StoreHandle) -> None:
    """With a live lease the views carry the holder and no warning."""
    rollout = ctl.json("start", str(EXAMPLE))["id"]
    lead(store, "ops-1:4242", at=datetime.now(UTC))
    for argv in (("status", str(rollout)), ("list",), ("abort", str(rollout), "-r", "x")):
        code, out, err = ctl(*argv)
        assert code == 0
        assert "no rolloutd" not in out + err, argv
    assert ctl.json("status", str(rollout))["leader"]["leading"] is True


def test_an_ended_rollout_needs_no_leader(ctl: Ctl, store: StoreHandle) -> None:
    """Only rollouts that have not ended wait for a leader: a list of ended ones says nothing."""
    rollout = ctl.json("start", str(EXAMPLE))["id"]
    move(store, rollout, Progress(ended="aborted", ended_at=datetime.now(UTC)), "aborted")
    assert "no rolloutd" not in ctl("list")[2]


def test_a_command_without_a_leader_says_it_waits(ctl: Ctl) -> None:
    """abort with no daemon running is queued, and says that it waits for one."""
    rollout = ctl.json("start", str(EXAMPLE))["id"]
    code, out, _ = ctl("abort", str(rollout), "--reason", "tool args wrong")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"abort of rollout {rollout} queued (command ")
    assert lines[1] == (
        "no rolloutd is leading (none has run on this database): the command waits until one does"
    )


def test_an_identical_command_is_not_queued_twice(ctl: Ctl, store: StoreHandle) -> None:
    """A second abort while the first waits answers with the first's id and writes nothing;
    a different command is queued."""
    rollout = ctl.json("start", str(EXAMPLE))["id"]
    # Running, as the daemon's first tick leaves it: pause applies.
    move(store, rollout, Progress(started_at=datetime.now(UTC)), "running")
    first = ctl.json("abort", str(rollout), "--reason", "tool args wrong")
    again = ctl.json("abort", str(rollout), "--reason", "still wrong")
    assert (first["queued"], again["queued"]) == (True, False)
    assert again["command"] == first["command"]
    code, out, _ = ctl("abort", str(rollout), "--reason", "third time")
    assert code == 0
    assert out.startswith(f"abort of rollout {rollout} already queued (command {first['command']})")
    pause = ctl.json("pause", str(rollout))
    assert pause["queued"] and pause["command"] != first["command"]
    with store.sessions() as session:
        kinds = [c.kind for c in queries.pending_commands(session, rollout)]
    assert kinds == ["abort", "pause"]
    history = ctl.json("history", str(rollout))
    assert [e["kind"] for e in history] == ["created", "command", "command"]
