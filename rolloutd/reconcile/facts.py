"""What a tick knows of a rollout, and what the leader keeps of it between ticks.

Only the leader writes a rollout's progress, steps, evaluations and attempts, so while it
leads under one lease epoch it keeps them in memory (:class:`Known`) and re-reads only what
others write: commands, in the batch's own transaction. A rollout whose tick wrote anything
besides its evaluations is read afresh on its next tick, and so is every rollout after the
epoch changed (another leader may have written in between).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.core.progress import Progress
from rolloutd.errors import NotFound
from rolloutd.evaluation.source import SuiteCounts
from rolloutd.gates.base import Pool
from rolloutd.operations import plan_of
from rolloutd.reconcile import records
from rolloutd.reconcile.perform import Attempt
from rolloutd.reconcile.suites import suite_counts
from rolloutd.store import queries
from rolloutd.store.models import Rollout
from rolloutd.store.steps import StepTimes

if TYPE_CHECKING:
    from rolloutd.store.types import Session


@dataclass
class Facts:
    """What one tick reads of a rollout."""

    rollout: Rollout
    plan: Plan
    progress: Progress
    owed: list[Attempt]
    """The rollout's open attempts."""
    done: frozenset[str]
    """The keys of its performed attempts."""
    succeeded: bool
    """It ended and a newer rollout of its service and environment exists."""
    steps: dict[int, StepTimes]
    """Its steps' times by index (none once it ended)."""
    newest: records.Newest
    suite_counts: dict[Pool, SuiteCounts] = field(default_factory=dict)
    """The newest suite run's schema counts of each pool in the step (for the schema gates)."""
    dirty: bool = False
    """This tick wrote more than its evaluations: read the rollout afresh next time."""

    @functools.cached_property
    def has_suite(self) -> bool:
        """Its plan has a suite gate, whose runs other jobs write."""
        return any(isinstance(gate, SuiteGate) for gate in self.plan.gates.values())


def read_many(
    session: Session, rollout_ids: Sequence[int], plans: Mapping[int, Plan]
) -> dict[int, Facts | NotFound]:
    """Everything a tick needs of each of ``rollout_ids``, read in ``session``: one statement a
    table for the batch (rollouts, open and performed actions, steps), then one a judging
    rollout for the newest verdicts of the gates it judges now. ``plans``: the plans known
    already (a rollout's plan never changes; parsing it is most of a read's cost).

    A rollout that does not exist gets :class:`~rolloutd.errors.NotFound` as its facts.
    """
    rows = queries.rollouts_of(session, rollout_ids)
    ids = list(rows)
    owed = queries.open_actions_of(session, ids) if ids else {}
    done = queries.done_action_keys_of(session, ids) if ids else {}
    steps = queries.steps_of(session, ids) if ids else {}
    found: dict[int, Facts | NotFound] = {}
    for rollout_id in rollout_ids:
        rollout = rows.get(rollout_id)
        if rollout is None:
            found[rollout_id] = NotFound(f"no rollout {rollout_id}")
            continue
        plan = plans.get(rollout_id) or plan_of(rollout)
        progress = Progress.from_storage(rollout.progress)
        ended = progress.ended is not None
        judging = not ended and progress.started_at is not None and progress.rollback is None
        found[rollout_id] = Facts(
            rollout=rollout,
            plan=plan,
            progress=progress,
            owed=[Attempt.of(a) for a in owed[rollout_id]],
            done=done[rollout_id],
            succeeded=ended and queries.has_successor(session, rollout),
            steps={} if ended else steps[rollout_id],
            newest=records.newest_stored(session, rollout_id, plan, progress)
            if judging
            else records.Newest(),
            suite_counts=suite_counts(session, rollout_id, plan, progress) if judging else {},
        )
    for rollout in rows.values():
        queries.keep_light(session, rollout)
    return found


class Known:
    """The facts the leader keeps between ticks, for one lease epoch."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.facts: dict[int, Facts] = {}
        self.claimed: set[int] = set()
        """The rollouts whose progress was written under this epoch (a new leader writes
        each rollout's progress on its first tick, so the row says who drives it)."""
        self.plans: dict[int, Plan] = {}
        """Each rollout's plan, kept when its facts are read afresh."""

    def under(self, epoch: int) -> None:
        """Forget everything known under another epoch."""
        if epoch != self.epoch:
            self.facts.clear()
            self.claimed.clear()
            self.epoch = epoch

    def missing(self, ids: Iterable[int]) -> list[int]:
        """The rollouts to read afresh: unknown ones, and those whose suite counts other jobs
        write."""
        return [i for i in ids if i not in self.facts or self.facts[i].has_suite]

    def keep(self, facts: Facts) -> None:
        """Keep ``facts`` for the next tick, unless the tick wrote more than evaluations (its
        plan is kept then)."""
        self.plans[facts.rollout.id] = facts.plan
        if facts.dirty:
            self.facts.pop(facts.rollout.id, None)
        else:
            self.facts[facts.rollout.id] = facts

    def forget(self, rollout_id: int | None = None) -> None:
        """Forget one rollout, or all."""
        if rollout_id is None:
            self.facts.clear()
            self.claimed.clear()
            self.plans.clear()
        else:
            self.facts.pop(rollout_id, None)
            self.claimed.discard(rollout_id)
            self.plans.pop(rollout_id, None)
