"""Performing actions: the one boundary where an attempt's outcome is recorded.

Every attempt (a weight change on :mod:`~rolloutd.reconcile.converge`'s road, an alert, a
redeploy, a verification) goes through :meth:`Performer.run`, and every failure becomes an
outcome here, by its class (kopf's
rule): a :class:`~rolloutd.errors.TemporaryError` backs off (its ``delay``, or 2 s doubling
to 5 min) and alerts ``action_stuck`` on the third failure in a row; a
:class:`~rolloutd.errors.PermanentError` (``nginx -t`` refuses, HAProxy has no such server)
marks the attempt ``failed`` and alerts at once. Either way the rollout holds where it is,
nothing is retried every tick, and a failed attempt is tried again only after the longest
wait, while the fact it serves is still the current one: an operator's fix is picked up,
and a fault that lasts costs at most a dozen events an hour.

An alert carries its routed messages from the moment it is written (:func:`alert_messages`);
performing it only queues them on the outbox.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from rolloutd import retry
from rolloutd.alerts.enqueue import Routed, enqueue_routed, newest_in, rollout_messages
from rolloutd.core.progress import Progress
from rolloutd.drivers import Drivers
from rolloutd.errors import NotFound, PermanentError, RolloutdError, TemporaryError
from rolloutd.reconcile.shell import NotLeading, Shell
from rolloutd.store import queries
from rolloutd.store.lease import Held
from rolloutd.store.models import Action

if TYPE_CHECKING:
    from rolloutd.reconcile.facts import Facts
    from rolloutd.store.types import Session

log = structlog.get_logger("rolloutd.reconcile")

# A temporary failure is alerted as stuck after this many attempts in a row.
STUCK_AFTER_ATTEMPTS = 3


@dataclass(frozen=True)
class Attempt:
    """An action row detached from its session."""

    id: int
    key: str
    kind: str
    payload: dict[str, Any]
    attempts: int
    status: str = "pending"
    retry_at: datetime | None = None

    @classmethod
    def of(cls, row: Action) -> Attempt:
        """Detach ``row``."""
        return cls(
            row.id,
            row.key,
            row.kind,
            dict(row.payload),
            row.attempts,
            row.status,
            row.next_attempt_at,
        )

    def waiting(self, wall: datetime) -> bool:
        """Whether the attempt is backing off after a failure."""
        return self.retry_at is not None and wall < self.retry_at


class Performer:
    """Performs attempts for the leader and records their outcomes."""

    def __init__(self, shell: Shell, drivers: Drivers) -> None:
        self.shell = shell
        self.drivers = drivers

    def owed(self, facts: Facts, owed: list[Attempt], bound: Any) -> None:
        """Perform the owed alerts, redeploys and verifications. A rollout that owes any is
        read afresh next tick: an attempt's outcome (its count, back-off, error) is on its row."""
        if not owed:
            return
        facts.dirty = True
        if sum(self.attempt(facts, action, bound) for action in owed):
            with self.shell.read() as session:
                facts.done = queries.done_action_keys(session, facts.rollout.id)

    def attempt(self, facts: Facts, action: Attempt, bound: Any) -> bool:
        """Perform an alert, a redeploy or a verification of ``facts``' rollout unless it is
        backing off; record the outcome (weights take :mod:`~rolloutd.reconcile.converge`'s
        road).

        :returns: whether it was performed and marked done.
        :raises NotLeading: when the lease is not ours; nothing was performed.
        """
        if action.kind in ("deploy", "verify"):
            return self.run(facts, action, lambda: self._deploy(facts, action), bound)
        if action.kind == "alert":
            return self.run(facts, action, lambda: None, bound)
        return self.run(facts, action, _unknown(action), bound)

    def run(self, facts: Facts, action: Attempt, effect: Callable[[], None], bound: Any) -> bool:
        """The outcome boundary: run ``effect`` for ``action`` of ``facts``' rollout unless it
        is backing off, and record what came of it on the action's row.

        :returns: whether it was performed and marked done.
        :raises NotLeading: when the lease is not ours; nothing was performed.
        """
        if action.waiting(self.shell.wall()):
            return False
        held = self.shell.held()
        try:
            effect()
        except NotLeading:
            raise
        except TemporaryError as exc:
            wait = retry.wait_after(exc, action.attempts + 1)
            self._failed(facts, action, held, str(exc), wait, bound, permanent=False)
            return False
        except (RolloutdError, ValueError) as exc:
            # Retrying will not help soon; it is tried again after the longest wait, in case
            # someone fixed what refused it.
            self._failed(facts, action, held, str(exc), retry.CAP, bound, permanent=True)
            return False
        with self.shell.write(held) as session:
            if action.kind == "alert":
                self._alert(session, facts, action)
            queries.finish_action(session, action.id, status="done", now=self.shell.clock())
        return True

    def _deploy(self, facts: Facts, action: Attempt) -> None:
        """Redeploy a pinned set on a replica, or verify that it runs there (health and
        digests), recording what happened; a failure raises and is retried with backoff."""
        from rolloutd.deploy.catalog import get_set

        rollout_id, plan = facts.rollout.id, facts.plan
        name, set_name = str(action.payload["replica"]), str(action.payload["artefacts"])
        replicas = {r.name: r for r in (*plan.pools.canary.replicas, *plan.pools.stable.replicas)}
        if name not in replicas:
            raise PermanentError(f"the plan has no replica {name!r}")
        with self.shell.read() as session:
            try:
                pinned = get_set(session, set_name)
            except NotFound as exc:
                raise TemporaryError(str(exc)) from None
        executor = self.drivers.executor(rollout_id, plan)
        held = self.shell.held()
        # Events are stamped when their fact was observed (a deploy may take minutes), never
        # with the time the tick began.
        if action.kind == "deploy":
            result = executor.deploy(replicas[name], pinned)
            now = self.shell.clock()
            with self.shell.write(held) as session:
                queries.record_deploy(
                    session,
                    result.as_dict(),
                    executor=result.executor,
                    step="rollback",
                    duration_s=result.duration_s,
                    started_at=now,
                    rollout_id=rollout_id,
                )
                if result.ok:
                    what = "redeployed" if result.changed else "already runs"
                    detail = f"{name} {what} the pinned set {set_name} ({pinned.digest[:12]})"
                    self._event(session, rollout_id, "artefacts_deployed", detail, action, now)
            if not result.ok:
                raise TemporaryError(f"deploying {set_name} on {name} failed: {result.reason}")
            return
        verification = executor.verify(replicas[name], pinned)
        now = self.shell.clock()
        if not verification.ok:
            raise TemporaryError(f"{name} is not verified on {set_name}: {verification.reason}")
        with self.shell.write(held) as session:
            detail = (
                f"{name} is healthy and serves the pinned set {set_name} ({pinned.digest[:12]})"
            )
            self._event(session, rollout_id, "replica_verified", detail, action, now)

    def _event(
        self,
        session: Session,
        rollout_id: int,
        kind: str,
        detail: str,
        action: Attempt,
        now: datetime,
    ) -> None:
        self.shell.event(
            session,
            rollout_id,
            kind,
            detail,
            now=now,
            dedup_key=f"{action.key}/{kind}",
            data=dict(action.payload),
        )

    def _alert(self, session: Session, facts: Facts, action: Attempt) -> None:
        """Queue the alert's Slack messages in ``session``, which also marks the action done.

        One transaction: a crash leaves either both (the sender delivers) or neither (the
        replay queues them again, under the same keys). Outbox times are wall-clock times:
        the sender paces and retries in real seconds even when rollout time is scaled.
        """
        payload, rollout_id = action.payload, facts.rollout.id
        topic, severity, text = str(payload["topic"]), str(payload["severity"]), payload["text"]
        messages: list[Routed] | None = payload.get("messages")
        if messages is None:
            # Written by a rolloutd that built messages only when performing: built now, from
            # what the tick knows of the rollout.
            messages = alert_messages(session, facts, facts.progress, payload)
        queued = enqueue_routed(
            session,
            messages,
            rollout_id=rollout_id,
            key=action.key,
            topic=topic,
            now=self.shell.wall(),
        )
        level = {"critical": "error", "warning": "warning"}.get(severity, "info")
        getattr(log, level)("alert", rollout=rollout_id, topic=topic, text=text, queued=queued)

    def _failed(
        self,
        facts: Facts,
        action: Attempt,
        held: Held,
        error: str,
        wait: timedelta,
        bound: Any,
        *,
        permanent: bool,
    ) -> None:
        attempt = action.attempts + 1
        rollout_id, now = facts.rollout.id, self.shell.clock()
        bound.warning(
            "action failed", key=action.key, attempt=attempt, error=error, permanent=permanent
        )
        with self.shell.write(held) as session:
            queries.bump_action_attempt(
                session,
                action.id,
                error=error,
                retry_at=self.shell.wall() + wait,
                permanent=permanent,
            )
            how = "refused" if permanent else "failed"
            self.shell.event(
                session,
                rollout_id,
                "action_failed",
                f"{action.key} {how} (attempt {attempt}; next try in {_seconds(wait)}): {error}",
                now=now,
                dedup_key=f"{action.key}/attempt-{attempt}",
                data={"key": action.key, "attempt": attempt, "permanent": permanent},
            )
            if permanent or attempt == STUCK_AFTER_ATTEMPTS:
                stuck: dict[str, Any] = {
                    "topic": "action_stuck",
                    "severity": "critical",
                    "text": f"{action.key} keeps failing: {error}",
                }
                stuck["messages"] = alert_messages(session, facts, facts.progress, stuck)
                # The key makes it one alert per attempt, however long the fault lasts.
                queries.enqueue_actions(
                    session,
                    rollout_id=rollout_id,
                    actions=[(f"alert/stuck/{action.key}", "alert", stuck)],
                    now=now,
                )


def alert_messages(
    session: Session, facts: Facts, progress: Progress, payload: Mapping[str, Any]
) -> list[Routed]:
    """The routed messages of an alert of ``facts``' rollout at ``progress``, its ``payload``
    as an alert action stores it (topic, severity and text, then its data), built in
    ``session`` (where the evidence link's evaluation is read)."""
    data = {k: v for k, v in payload.items() if k not in _SAID}
    return rollout_messages(
        facts.plan,
        progress,
        facts.rollout,
        topic=str(payload["topic"]),
        severity=str(payload["severity"]),
        text=str(payload["text"]),
        data=data,
        newest=newest_in(session, facts.rollout.id),
    )


# What an alert action's payload holds besides the alert's data.
_SAID = frozenset({"topic", "severity", "text", "messages"})


def _unknown(action: Attempt) -> Callable[[], None]:
    def refuse() -> None:
        raise PermanentError(f"unknown action kind {action.kind!r}")

    return refuse


def _seconds(wait: timedelta) -> str:
    return f"{wait.total_seconds():g} s"
