"""Delivering the outbox to Slack: in order, at Slack's pace, through outages and crashes.

The leader runs :meth:`Sender.run_once` every half second. Each run takes the oldest pending
message of each webhook and posts it if the webhook is not resting:

* ``2xx`` (Slack says ``ok``): marked sent; the webhook rests one second (Slack allows about
  one message per second per webhook).
* ``429``: the webhook rests for ``Retry-After`` seconds; the message stays first in line.
* ``5xx``, a refused connection, a timeout: retried with exponential backoff (2 s … 60 s), the
  webhook resting meanwhile, so a Slack outage costs one request a minute per webhook.
* any other ``4xx`` (``invalid_payload``, ``channel_not_found``, ``no_service``, ...): retrying
  cannot help; the message is given up and an ``alert_undeliverable`` event says so.

A message is marked sent only after Slack answered, so a crash in between sends it again on
the next run: a repeat, never a loss. The webhook URL is a secret and appears nowhere but in
the request itself: what is kept of an answer or an error is an excerpt of it with every
fragment of the URL's path hidden (see :mod:`rolloutd.alerts.answers`).

Delivery is fenced like every leader write. A run keeps the lease it started under; it reads
the queues only while that lease is live, and each write (sent, given up, the next attempt,
and the event beside it) locks the lease row and carries the lease's fence, so a sender that
was paused past its lease changes nothing once another instance leads. The post itself cannot
be fenced: one already on its way when the lease is lost arrives, and the new leader, finding
the message still pending, posts it again (at least once, as after a crash).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import httpx
import structlog

from rolloutd import retry
from rolloutd.alerts.answers import excerpt, read_start
from rolloutd.alerts.webhooks import Webhooks
from rolloutd.store import queries
from rolloutd.store.db import transaction
from rolloutd.store.lease import Fence, Held, fence, hold_for_write
from rolloutd.store.outbox import defer, give_up, heads_of_queues, mark_sent

if TYPE_CHECKING:
    from rolloutd.store.types import Session, Sessions

log = structlog.get_logger("rolloutd.alerts")

PACE = timedelta(seconds=1)
BACKOFF_FIRST = timedelta(seconds=2)
BACKOFF_CAP = timedelta(seconds=60)
# Slack asks for a pause with Retry-After; a missing or absurd value gets these bounds.
RETRY_AFTER_DEFAULT = 1.0
RETRY_AFTER_MAX = 600.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Outcome = Literal["sent", "rate_limited", "retry", "failed", "unconfigured"]
# What the sender tells the audit log about a message, by the suffix of the event's dedup key.
_NEWS_EVENTS = {"undeliverable": "alert_undeliverable", "unconfigured": "alert_waiting"}
# The lease condition ANDed into each write, or None when the sender runs without a lease.
_Guard = Fence | None


@dataclass(frozen=True)
class Delivery:
    """What one attempt came to, and how long the webhook must rest afterwards."""

    outcome: Outcome
    detail: str
    rest: timedelta = PACE


def classify(status: int, said: str, retry_after: str | None) -> Delivery:
    """Read Slack's answer to one post (pure, so every branch is testable); ``said`` is the
    excerpt of its body that may be shown (see :func:`rolloutd.alerts.answers.excerpt`)."""
    said = said or "(empty body)"
    if 200 <= status < 300:
        return Delivery("sent", said)
    if status == 429:
        return Delivery("rate_limited", f"429 {said}", timedelta(seconds=_seconds(retry_after)))
    if status >= 500 or status == 408:
        return Delivery("retry", f"{status} {said}")
    # 400 invalid_payload, 403 action_prohibited, 404 channel_not_found / no_service,
    # 410 channel_is_archived: the same request will be refused again.
    return Delivery("failed", f"{status} {said}")


def _seconds(header: str | None) -> float:
    try:
        value = float(header) if header is not None else RETRY_AFTER_DEFAULT
    except ValueError:
        return RETRY_AFTER_DEFAULT
    return min(max(value, 0.0), RETRY_AFTER_MAX)


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failure in a row: 2 s, 4 s, 8 s ... at most 60 s
    (a webhook recovers sooner than an engine, and alerts are urgent)."""
    return retry.backoff(attempts, cap=BACKOFF_CAP, first=BACKOFF_FIRST)


@dataclass(frozen=True)
class _Head:
    id: int
    rollout_id: int | None
    topic: str
    channel: str
    webhook_env: str
    message: dict[str, Any]
    attempts: int
    next_attempt_at: datetime


class _LeaseLost(Exception):
    """The lease the run started under is gone: the run writes nothing more."""


class Sender:
    """Posts outbox messages to their webhooks; one instance per daemon, one run at a time.

    ``lease`` gives the lease this process leads under (None while it stands by); every write
    is fenced by it. Without ``lease`` (one instance and no lease, as in a single-run tool)
    the writes are not fenced and ``leading`` alone decides whether to post.
    """

    def __init__(
        self,
        sessions: Sessions,
        *,
        webhooks: Webhooks,
        clock: Callable[[], datetime],
        timeout: float = 10.0,
        client: httpx.Client | None = None,
        leading: Callable[[], bool] = lambda: True,
        actor: str = "rolloutd",
        observe: Callable[[Outcome], None] | None = None,
        lease: Callable[[], Held | None] | None = None,
        ui_url: str | None = None,
    ) -> None:
        self.sessions = sessions
        self.ui_url = ui_url
        self.webhooks = webhooks
        self.clock = clock
        self.client = client or httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)), follow_redirects=False
        )
        self.leading = leading
        self.actor = actor
        self.observe = observe
        self.lease = lease
        # When each webhook may be posted to again, keyed by URL (never logged).
        self._resting: dict[str, datetime] = {}

    def run_once(self) -> int:
        """Post the next due message of each webhook; return how many Slack accepted."""
        held = self.lease() if self.lease is not None else None
        if self.lease is not None and held is None:
            return 0  # a standby must not speak
        with transaction(self.sessions) as session:
            guard = None if held is None else fence(held, now=self.clock())
            heads = [_detach(row) for row in heads_of_queues(session, fence=guard)]
        sent = 0
        for head in heads:
            now = self.clock()
            if head.next_attempt_at > now:
                continue
            if not self._leading(held, now):
                break  # the new leader sends what is left
            url = self.webhooks.url(head.webhook_env)
            try:
                if url is None:
                    self._unconfigured(head, held, now)
                    continue
                if self._resting.get(url, _EPOCH) > now:
                    continue
                delivery = self._post(
                    url, with_page_link(head.message, head.rollout_id, self.ui_url)
                )
                now = self.clock()
                rest = self._record(head, delivery, held, now)
            except _LeaseLost:
                log.warning("alert outcome not recorded: the leader lease was lost", outbox=head.id)
                break
            self._resting[url] = now + rest
            sent += delivery.outcome == "sent"
        return sent

    def close(self) -> None:
        """Close the HTTP connections."""
        self.client.close()

    def _post(self, url: str, message: dict[str, Any]) -> Delivery:
        try:
            with self.client.stream("POST", url, json=message) as response:
                body = read_start(response)
        except httpx.HTTPError as exc:
            # Refused, reset, timed out: Slack (or the way to it) may be back in a moment.
            reason = excerpt(str(exc), url) or type(exc).__name__
            return Delivery("retry", f"{type(exc).__name__}: {reason}")
        except httpx.InvalidURL as exc:
            # A broken port or host in the variable: no retry mends it, a corrected value does
            # (the sender reads the variable again for the next message).
            return Delivery(
                "failed", f"the webhook URL is not a valid URL ({excerpt(str(exc), url)})"
            )
        return classify(
            response.status_code, excerpt(body, url), response.headers.get("Retry-After")
        )

    def _leading(self, held: Held | None, now: datetime) -> bool:
        """Whether this process may still post under the lease the run started with."""
        if not self.leading():
            return False
        if self.lease is None:
            return True  # no lease to lose: ``leading`` alone decides
        current = self.lease()
        return (
            held is not None
            and current is not None
            and current.epoch == held.epoch
            and current.valid_at(now)
        )

    @contextmanager
    def _write(self, held: Held | None, now: datetime) -> Iterator[tuple[Session, _Guard]]:
        """A transaction that writes only while ``held`` is the live lease, with its fence.

        :raises _LeaseLost: when it is not; nothing is written.
        """
        with transaction(self.sessions) as session:
            if held is None:
                yield session, None
                return
            # The lock makes a takeover wait for this commit, so the new leader reads what we
            # wrote; the fence in each UPDATE keeps SQLite (no row locks) just as safe.
            if not hold_for_write(session, held, now=now):
                raise _LeaseLost
            yield session, fence(held, now=now)

    def _record(
        self, head: _Head, delivery: Delivery, held: Held | None, now: datetime
    ) -> timedelta:
        """Write the attempt's outcome; return how long the webhook must rest.

        :raises _LeaseLost: when the lease is gone; nothing is written.
        """
        bound = log.bind(
            outbox=head.id, channel=head.channel, topic=head.topic, rollout=head.rollout_id
        )
        if self.observe is not None:
            self.observe(delivery.outcome)
        with self._write(held, now) as (session, guard):
            if delivery.outcome == "sent":
                mark_sent(session, head.id, now=now, fence=guard)
                bound.info("alert sent", attempts=head.attempts + 1)
            elif delivery.outcome == "failed":
                # Only the sender that gave the message up reports it, once.
                if give_up(session, head.id, now=now, error=delivery.detail, fence=guard):
                    self._report(
                        session,
                        head,
                        "undeliverable",
                        f"given up: Slack answered {delivery.detail}; check the webhook in "
                        f"{head.webhook_env}",
                        now,
                    )
                bound.error("alert undeliverable", error=delivery.detail)
            else:
                # The whole webhook rests, so a Slack outage costs one request per backoff.
                rest = backoff(head.attempts + 1) if delivery.outcome == "retry" else delivery.rest
                defer(session, head.id, until=now + rest, error=delivery.detail, fence=guard)
                bound.warning(
                    "alert deferred",
                    outcome=delivery.outcome,
                    error=delivery.detail,
                    retry_in=rest.total_seconds(),
                )
                return rest
        return delivery.rest

    def _unconfigured(self, head: _Head, held: Held | None, now: datetime) -> None:
        """Defer a message whose webhook variable gives no URL, with an event saying why.

        :raises _LeaseLost: when the lease is gone; nothing is written.
        """
        problem = self.webhooks.problem(head.webhook_env)
        wait = backoff(head.attempts + 1)
        if self.observe is not None:
            self.observe("unconfigured")
        with self._write(held, now) as (session, guard):
            # Kept, not given up: the alert goes out once the variable is set (SIGHUP or restart).
            if defer(session, head.id, until=now + wait, error=problem, fence=guard):
                self._report(session, head, "unconfigured", f"waits in the outbox: {problem}", now)
        log.error("alert webhook not configured", channel=head.channel, problem=problem)

    def _report(self, session: Session, head: _Head, news: str, why: str, now: datetime) -> None:
        """Add the event that says ``news`` about ``head`` (once per message and news)."""
        queries.append_event(
            session,
            rollout_id=head.rollout_id,
            kind=_NEWS_EVENTS[news],
            actor=self.actor,
            detail=f"{head.topic} alert to channel {head.channel} {why}",
            data={"outbox": head.id, "channel": head.channel, "topic": head.topic},
            now=now,
            dedup_key=f"outbox-{head.id}/{news}",
        )


def with_page_link(
    message: dict[str, Any], rollout_id: int | None, ui_url: str | None
) -> dict[str, Any]:
    """``message`` with a link to the rollout's page in the web view, when the deployment
    says where that is (``ROLLOUTD_UI_URL``); added at delivery, so the link follows the
    setting rather than what it was when the alert was queued."""
    if rollout_id is None or not ui_url:
        return message
    page = f"{ui_url.rstrip('/')}/rollouts/{rollout_id}"
    text = {"type": "mrkdwn", "text": f"<{page}|Open the rollout's page>"}
    return {**message, "blocks": [*message.get("blocks", []), {"type": "section", "text": text}]}


def _detach(row: Any) -> _Head:
    """A copy of the row's columns that outlives its session."""
    columns = {column.name: getattr(row, column.name) for column in fields(_Head)}
    return _Head(**columns | {"message": dict(row.message)})


__all__ = ["Delivery", "Sender", "backoff", "classify", "with_page_link"]
