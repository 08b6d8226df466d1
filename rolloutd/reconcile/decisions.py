"""Writing a decision: only what it changed, in the batch's transaction.

A baking rollout's decision changes nothing worth writing (:func:`quiet`), but on its first
tick under a lease epoch (:func:`claim`: its progress, so the row says who drives it); any
other is written whole (:func:`write`): progress under the revision and lease fence, events
under keys that make a retried tick idempotent, command outcomes, the attempt row of a new
desired fact, every older one superseded in the same transaction so that it is never sent,
and each alert with its routed messages, built from the decision's progress and the
evaluations the batch just stored (performing it only queues them).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rolloutd.core.actions import Alert
from rolloutd.core.machine import Decision
from rolloutd.reconcile.converge import enqueue_attempt, supersede
from rolloutd.reconcile.facts import Facts
from rolloutd.reconcile.perform import Attempt, alert_messages
from rolloutd.reconcile.shell import Shell
from rolloutd.store import queries
from rolloutd.store.lease import Held, fence

if TYPE_CHECKING:
    from rolloutd.store.types import Session


def quiet(facts: Facts, decision: Decision, handled: list[Any]) -> bool:
    """Whether ``decision`` changed nothing worth writing: no command, event or action, and
    the same progress but for when each gate's newest verdict was counted (``last_seen``:
    counting a counted pass again changes nothing, and any other count changes a streak)."""
    before = facts.progress
    return (
        not handled
        and not decision.events
        and not decision.actions
        and not decision.outcomes
        and decision.state.value == facts.rollout.state
        and replace(decision.progress, last_seen=before.last_seen) == before
    )


def claim(
    shell: Shell, session: Session, held: Held, facts: Facts, decision: Decision, now: datetime
) -> None:
    """Write a quiet decision's progress, under the revision and lease fence, on a rollout's
    first tick under this lease epoch: the row then says who drives it. Nothing else changed,
    so what is kept of the rollout stays true and it is not read afresh."""
    _save_progress(shell, session, held, facts, decision, max(shell.clock(), now))
    queries.keep_light(session, facts.rollout)


def write(
    shell: Shell,
    session: Session,
    held: Held,
    facts: Facts,
    decision: Decision,
    handled: list[Any],
    now: datetime,
) -> tuple[bool, list[Attempt]]:
    """Write what ``decision`` changed of one rollout, in the batch's transaction.

    :returns: whether it changed the desired fact (whose attempt row it wrote), and the
        attempts of the decision's other actions, to be performed once it is committed.
    """
    facts.dirty = True
    moved = False
    rollout, rollout_id = facts.rollout, facts.rollout.id
    # What the decision did is stamped no earlier than the commands it handled: a
    # command that arrived while the tick ran is handled after it was made.
    stamp = max([shell.clock(), now, *(c.created_at for c in handled)])
    revision = rollout.revision
    _save_progress(shell, session, held, facts, decision, stamp)
    for i, event in enumerate(decision.events):
        queries.append_event(
            session,
            rollout_id=rollout_id,
            kind=event.kind,
            actor=event.actor if event.actor != "rolloutd" else shell.actor,
            detail=event.detail,
            data=event.data,
            now=stamp,
            dedup_key=f"rev-{revision}/{i}",
        )
    for outcome in decision.outcomes:
        queries.finish_command(
            session,
            outcome.command_id,
            status="applied" if outcome.applied else "rejected",
            outcome=outcome.detail,
            now=stamp,
        )
    owed = [a for a in facts.owed if a.kind != "set_weight"]
    desired = decision.progress.desired
    if desired is not None and desired != facts.progress.desired:
        # The new fact's row is written with the fact; every older one will never be sent.
        supersede(shell, session, rollout_id, desired, stamp)
        moved = True
        owed.append(Attempt.of(enqueue_attempt(session, rollout_id, desired, stamp)))
    actions = []
    for action in decision.actions:
        payload = action.payload()
        if isinstance(action, Alert):
            payload["messages"] = alert_messages(session, facts, decision.progress, payload)
        actions.append((action.key, action.kind, payload))
    added = queries.enqueue_actions(session, rollout_id=rollout_id, actions=actions, now=stamp)
    new = [Attempt.of(a) for a in added]
    facts.owed = owed + new
    return moved, new


def _save_progress(
    shell: Shell, session: Session, held: Held, facts: Facts, decision: Decision, now: datetime
) -> None:
    """The decision's progress and state, under the revision read and the lease fence."""
    queries.save_progress(
        session,
        facts.rollout,
        progress=decision.progress.for_storage(),
        state=decision.state.value,
        active=not decision.state.terminal,
        now=now,
        fence=fence(held, now=shell.wall()),
    )
