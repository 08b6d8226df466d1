"""kill -9 of the leader at seeded random moments: every rollout still ends as it should.

Each trial is one rollout on the ``file`` router and ``file`` metrics with a quick plan
(canary 5% → canary 25% → full, bakes of 0.5-1 s, ticks every 200 ms); some trials
(seeded) make the ``oom`` rollback trigger breach part-way (their plans hold at a pause
before full), so the rollback path is crashed into too. Trials run five at a time under
one daemon, which is SIGKILLed at a seeded moment 0.05-1.5 s after it starts leading and
restarted, until every rollout of the round has ended: the more rollouts tick at once,
the likelier a kill lands inside a tick.

After a kill the dead leader's lease is expired by hand, which is what waiting out its TTL
would do (nobody else runs); test_leadership proves the real takeover. This keeps the rounds
in budget: each restart already costs 1-2 s of interpreter start-up. As the TTL then costs
no time, it is 5 s rather than the 3 s of the other daemon tests, which keeps a leader on a
busy host clear of its 2 s write margin (see test_leadership's too-short-lease test).
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .helpers import (
    FULL,
    PAUSE,
    Daemon,
    Daemons,
    Db,
    Workspace,
    assert_within,
    canary,
    start_rollout_in,
    wait_lease_renewed,
    wait_until,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LEASE_TTL_SECONDS = 5.0
ROUNDS = 5
TRIALS_PER_ROUND = 5
MAX_RESTARTS = 4  # per round; after that the daemon is left to finish
ROUND_TIMEOUT = 90.0
TERMINAL = frozenset({"completed", "rolled_back", "aborted", "failed"})


@dataclass
class Trial:
    """One rollout, its seeded plan and whether (and when) its canary starts OOMing."""

    seed: int
    workspace: Workspace
    breach_after: float | None  # seconds after the round's first leader, or None: clean
    rollout: int = 0
    flipped: bool = False
    expected: str = field(init=False)

    def __post_init__(self) -> None:
        self.expected = "completed" if self.breach_after is None else "rolled_back"


@dataclass
class Tally:
    """What the whole file did, for the summary line."""

    trials: int = 0
    breaches: int = 0
    kills: int = 0
    kills_leaving_pending_actions: int = 0
    restarts: int = 0


def make_trial(seed: int, root: Path) -> Trial:
    """A trial's plan (bakes, breach or not) drawn from its seed, written to its workspace."""
    rng = random.Random(seed)
    bakes = [rng.choice(["500ms", "750ms", "1s"]) for _ in range(2)]
    steps = [canary(5, bakes[0]), canary(25, bakes[1]), FULL]
    breach_after = rng.uniform(0.1, 2.5) if rng.random() < 0.35 else None
    if breach_after is not None:
        # Hold a breach trial at a pause, so that a breach however late (a slow host, a kill)
        # still finds it running; it may also land in a bake or at the pause itself.
        steps.insert(2, PAUSE)
    workspace = Workspace(root, f"trial-{seed}")
    workspace.write_plan(steps)
    workspace.write_metrics()
    return Trial(seed, workspace, breach_after)


def run_round(
    number: int, daemons: Daemons, db: Db, root: Path, tally: Tally
) -> tuple[list[Trial], Daemon]:
    """Run one round to the end of all its rollouts; return its trials and the last daemon."""
    rng = random.Random(number)
    trials = [make_trial(number * 100 + i, root) for i in range(TRIALS_PER_ROUND)]
    for trial in trials:
        trial.rollout = db.start_rollout(trial.workspace.plan_path)
    ids = [t.rollout for t in trials]
    deadline = time.monotonic() + ROUND_TIMEOUT
    first_leader: float | None = None

    def ended() -> bool:
        states = db.rows("SELECT state FROM rollouts WHERE id = ANY(:ids)", ids=ids)
        return all(row["state"] in TERMINAL for row in states)

    def breach_due() -> None:
        for trial in trials:
            due = trial.breach_after is not None and first_leader is not None
            if due and not trial.flipped and time.monotonic() >= first_leader + trial.breach_after:
                trial.workspace.write_metrics(oom_events=1)
                trial.flipped = True

    restarts = 0
    while True:
        daemon = daemons.spawn(f"crash-{number}")
        wait_until(lambda d=daemon: d.logged("leading"), 20, "the daemon to lead", interval=0.01)
        first_leader = first_leader or time.monotonic()
        kill_at = time.monotonic() + rng.uniform(0.05, 1.5) if restarts < MAX_RESTARTS else None
        while not ended():
            breach_due()
            if kill_at is not None and time.monotonic() >= kill_at:
                break
            assert time.monotonic() < deadline, f"round {number} did not end"
            assert daemon.alive, f"the daemon died by itself:\n{daemon.log_tail()}"
            time.sleep(0.02)
        else:
            return trials, daemon
        daemon.kill()
        tally.kills += 1
        tally.kills_leaving_pending_actions += bool(pending_actions(db, ids))
        db.expire_lease()
        restarts += 1
        tally.restarts += 1


def pending_actions(db: Db, ids: list[int]) -> int:
    """How many actions of these rollouts are written but not yet performed."""
    return int(
        db.scalar(
            "SELECT count(*) FROM actions WHERE status = 'pending' AND rollout_id = ANY(:ids)",
            ids=ids,
        )
    )


def step_of(detail: str) -> int:
    """The step (numbered from 1, as every view numbers them) that a step_entered or
    step_completed event is about."""
    found = re.match(r"step (\d+) ", detail)
    assert found, detail
    return int(found.group(1))


def check_trial(trial: Trial, db: Db) -> None:
    """The rollout ended as expected, the router agrees, nothing was done or recorded twice."""
    where = f"trial {trial.seed} (rollout {trial.rollout}, expected {trial.expected})"
    assert db.state(trial.rollout) == trial.expected, where
    final = 100 if trial.expected == "completed" else 0
    assert trial.workspace.router_weight() == final, where
    recorded = db.scalar(
        "SELECT payload FROM actions WHERE rollout_id = :id AND kind = 'set_weight'"
        " AND status = 'done' ORDER BY done_at DESC, id DESC LIMIT 1",
        id=trial.rollout,
    )
    assert recorded["weight"] == final, where

    journal = trial.workspace.journal()
    if not journal or journal[-1] != final:
        # The driver appends the journal line after the rename: a kill -9 between the two
        # leaves the file at the weight and the journal one line short until the next write
        # (tests/routers/test_file_journal.py), and the last write has none after it.
        journal.append(trial.workspace.router_weight())
    if trial.expected == "completed":
        assert journal == sorted(journal), f"{where}: weights went backwards: {journal}"
        # That every step was entered and completed once is checked on the events below.
        assert set(journal) <= {5, 25, 100}, f"{where}: journal {journal}"
    else:
        rolled = journal.index(0)
        assert journal[:rolled] == sorted(journal[:rolled]), f"{where}: journal {journal}"
        assert set(journal[rolled:]) == {0}, f"{where}: weight moved after rollback: {journal}"
        assert set(journal[:rolled]) <= {5, 25, 100}, f"{where}: journal {journal}"

    events = db.events(trial.rollout)
    once = Counter(e["kind"] for e in events if e["kind"] not in ("step_entered", "step_completed"))
    entered = Counter(step_of(e["detail"]) for e in events if e["kind"] == "step_entered")
    completed = Counter(step_of(e["detail"]) for e in events if e["kind"] == "step_completed")
    verified = Counter(e["detail"] for e in events if e["kind"] == "weight_verified")
    for counter in (entered, completed, verified):
        assert set(counter.values()) <= {1}, f"{where}: recorded twice: {counter}"
    for kind in ("started", "completed", "rollback_started", "rolled_back"):
        assert once[kind] <= 1, f"{where}: {kind} recorded {once[kind]} times"
    assert once["started"] == 1, where
    if trial.expected == "completed":
        assert set(entered) == set(completed) == {1, 2, 3}, where
        assert once["completed"] == 1, where
        assert once["rollback_started"] == 0, where
    else:
        assert once["rollback_started"] == once["rolled_back"] == 1, where
    assert once["failed"] == once["aborted"] == 0, where
    assert db.pending_actions(trial.rollout) == 0, where


def test_killed_leaders_leave_every_rollout_finished_once_at_the_recorded_weight(
    daemons: Daemons, db: Db, tmp_path: Path
) -> None:
    """Across seeded kill -9s, rollouts end right, routers read the recorded weight, no repeats."""
    tally = Tally()
    started = time.monotonic()
    for number in range(1, ROUNDS + 1):
        trials, daemon = run_round(number, daemons, db, tmp_path, tally)
        # A kill may land after a rollout's last write but before its last action: the
        # restarted leader replays whatever is still pending, ended rollouts included.
        ids = [t.rollout for t in trials]
        wait_until(
            lambda ids=ids: not pending_actions(db, ids),
            10,
            "the last leader to perform every pending action",
        )
        assert daemon.terminate() == 0
        for trial in trials:
            check_trial(trial, db)
        tally.trials += len(trials)
        tally.breaches += sum(t.expected == "rolled_back" for t in trials)

    print(
        f"\ncrash recovery: {tally.trials} trials ({tally.breaches} rolled back) in {ROUNDS}"
        f" rounds, {tally.kills} kills ({tally.kills_leaving_pending_actions} left an action"
        f" pending), {tally.restarts} restarts, {time.monotonic() - started:.0f} s"
    )
    assert tally.trials >= 20
    assert 0 < tally.breaches < tally.trials
    assert tally.kills >= ROUNDS


@pytest.fixture
def alert_outage(db: Db) -> Iterator[Callable[[], None]]:
    """Until the returned function is called, the database refuses to mark any alert done."""
    db.execute("CREATE TABLE test_alert_outage (since timestamptz)")
    db.execute("INSERT INTO test_alert_outage VALUES (now())")
    db.execute(
        """
        CREATE FUNCTION test_refuse_alert_done() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.kind = 'alert' AND NEW.status = 'done'
               AND EXISTS (SELECT 1 FROM test_alert_outage) THEN
                RAISE EXCEPTION 'test outage: cannot mark % done', NEW.key;
            END IF;
            RETURN NEW;
        END $$
        """
    )
    db.execute(
        "CREATE TRIGGER test_refuse_alert_done BEFORE UPDATE ON actions"
        " FOR EACH ROW EXECUTE FUNCTION test_refuse_alert_done()"
    )
    yield lambda: db.execute("DELETE FROM test_alert_outage")
    # The database is shared by the session's Postgres tests: leave it as it was.
    db.execute("DROP TRIGGER IF EXISTS test_refuse_alert_done ON actions")
    db.execute("DROP FUNCTION IF EXISTS test_refuse_alert_done()")
    db.execute("DROP TABLE IF EXISTS test_alert_outage")


def test_an_action_left_pending_by_the_ending_tick_is_retried_when_the_fault_clears(
    daemons: Daemons, db: Db, tmp_path: Path, alert_outage: Callable[[], None]
) -> None:
    """The final alert of a rollout, which could not be marked done, is retried by the leader."""
    daemon = daemons.spawn("a")
    wait_until(lambda: daemon.logged("leading"), 10, "the daemon to lead")
    _, rollout = start_rollout_in(db, tmp_path, "ending", [canary(5, "500ms"), FULL])
    wait_until(lambda: db.state(rollout) == "completed", 15, "the rollout to complete")
    if db.pending_actions(rollout) != 1:  # the "completed" alert, refused by the outage
        pytest.fail(f"expected one pending alert, found {db.pending_actions(rollout)}")
    # Let the leader take a few main-loop turns with the fault still there (each renews the
    # lease, then syncs the jobs): the alert stays pending. Then clear the fault.
    for _ in range(3):
        wait_lease_renewed(db)
    assert db.pending_actions(rollout) == 1
    alert_outage()

    assert_within(
        lambda: db.pending_actions(rollout) == 0, 5, "the pending alert to be retried and done"
    )
    assert daemon.alive
