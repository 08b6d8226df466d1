"""Gate signals from Prometheus: the signal's templates, rendered and asked at ``now``.

Each measurement runs the signal's queries (value, samples, buckets) as instant queries
evaluated at the ``now`` the caller gives, so a scaled or fake clock asks about the moment
it means. Whatever is not one finite number -- an HTTP or PromQL error, a timeout, a refused
connection, an empty answer, NaN, an infinity -- is a :class:`MeasurementError` carrying the
query, never a value: a gate must not pass on missing data.

Two checks come first, because a query over a window answers from whatever samples the
window holds. *Stale is not data*: the signal's ``fresh`` series must have a sample newer
than two scrape intervals, or the pool is not being scraped and its frozen counts are not
evidence. *Absent is not zero*: when a query matches nothing, each series it selects is
looked up and the answer names the one that does not exist and why (no such metric, not on
this pool, or not with that label), with the template's note on which versions lack it.

``prometheus_api_client`` (and through it ``requests``) is imported here only, so the CLI
never pays for it.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from rolloutd.core.stats.matched import Cell
from rolloutd.gates.base import Measurement, MeasurementError, Pool
from rolloutd.metrics.batching import POOLS, both_pools, both_pools_selector
from rolloutd.metrics.budget import time_left
from rolloutd.metrics.cells import cells_from_ranges
from rolloutd.metrics.templates import Labels, Signal, Templates, promql_duration, render

_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")
# A vector selector with matchers: a metric name not preceded by a name character, then {...}
# (label values are double-quoted strings, which may hold braces).
_SELECTOR = re.compile(r'(?<![\w:])([A-Za-z_:][A-Za-z0-9_:]*)\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
# How far back a silent series is looked for, to tell "stopped" from "never existed".
_RECENTLY = "1h"
_STATUS = re.compile(r"HTTP Status Code (\d+)")
_COUNTING = ("events", "count")
# Joint answers kept for the other pool's question, and joint query shapes, at most.
_KEEP_AT_MOST = 256


class _ThreadClients(threading.local):
    """One Prometheus client per thread for a URL."""

    def __init__(self, disable_ssl: bool) -> None:
        self.disable_ssl = disable_ssl
        self.client: PrometheusConnect | None = None


_CLIENTS: dict[tuple[str, bool], _ThreadClients] = {}
_CLIENTS_LOCK = threading.Lock()


def _clients(url: str, disable_ssl: bool) -> _ThreadClients:
    with _CLIENTS_LOCK:
        return _CLIENTS.setdefault((url, disable_ssl), _ThreadClients(disable_ssl))


@dataclass(frozen=True)
class _Answer:
    """One instant query's answer: the series it returned as (labels, value text)."""

    query: str
    series: list[tuple[dict[str, str], str]]


class PrometheusMetrics:
    """A :class:`~rolloutd.gates.base.MetricsSource` over the Prometheus HTTP API."""

    def __init__(
        self,
        url: str,
        templates: Templates,
        *,
        pool_label: str = "pool",
        labels: Labels | None = None,
        scrape_interval: timedelta = timedelta(seconds=15),
        timeout: timedelta = timedelta(seconds=10),
        disable_ssl: bool = False,
        batch: bool = True,
    ) -> None:
        """A source asking ``url``; no request is made before the first ``measure``.
        ``batch``: ask both pools in one query where the signal's templates allow.

        :raises ValueError: a label name that is not one, or a duration not positive.
        """
        self.labels = labels or Labels(pool_label=pool_label)
        self.labels.check()
        if timeout <= timedelta(0) or scrape_interval <= timedelta(0):
            raise ValueError(f"timeout and scrape_interval must be positive, got {timeout}")
        self.url = url.rstrip("/")
        self.label = _without_credentials(self.url)
        self.templates = templates
        self.pool_label = self.labels.pool_label
        self.stale_after = 2 * scrape_interval
        self.timeout = timeout.total_seconds()
        self._clients = _clients(self.url, disable_ssl)
        self.batch = batch
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, Pool, timedelta, datetime], Measurement] = {}
        self._joint: dict[tuple[str, timedelta], dict[str, tuple[str, str]] | None] = {}

    @property
    def _client(self) -> PrometheusConnect:
        """This thread's client of the URL, shared by every source that asks it (one
        keep-alive connection per thread, not one per rollout)."""
        client: PrometheusConnect | None = getattr(self._clients, "client", None)
        if client is None:
            # No retries inside a tick (the next tick asks again, and a tick must stay
            # short); read=False hands back a read timeout as itself, not a connection error.
            client = PrometheusConnect(
                self.url,
                disable_ssl=self._clients.disable_ssl,
                retry=Retry(total=0, read=False, raise_on_status=False),
            )
            self._clients.client = client
        return client

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The value of ``signal`` on ``pool`` over ``window`` ending at ``now``.

        Where the signal's templates allow, one query per role answers both pools and the
        other pool's measurement is kept for its caller's next question (a gate asks both
        at the same ``now``); whatever the joint answer cannot settle is asked per pool.

        :raises MeasurementError: unknown signal, bad window, or no finite answer.
        """
        spec = self.templates.signals.get(signal)
        if spec is None:
            known = ", ".join(sorted(self.templates.signals))
            raise MeasurementError(
                f"no signal {signal!r} in {self.templates.source} (it defines: {known})"
            )
        with self._lock:
            kept = self._kept.pop((signal, pool, window, now), None)
        if kept is not None:
            return kept
        if self.batch and pool in POOLS:
            both = self._measure_both(signal, spec, window, now)
            with self._lock:
                # Kept answers are for one moment: a new ``now`` makes the old ones moot.
                if any(key[3] != now for key in self._kept) or len(self._kept) > _KEEP_AT_MOST:
                    self._kept.clear()
                for other, measured in both.items():
                    if other != pool:
                        self._kept[(signal, other, window, now)] = measured
            if pool in both:
                return both[pool]
        return self._measure_one(signal, spec, pool, window, now)

    def _measure_one(
        self, signal: str, spec: Signal, pool: Pool, window: timedelta, now: datetime
    ) -> Measurement:
        try:
            queries = {
                role: render(text, pool=pool, window=window, labels=self.labels)
                for role, text in spec.queries().items()
            }
        except ValueError as exc:
            raise MeasurementError(f"{signal}: {exc}") from None
        where = f"{signal} on {pool} over the last {promql_duration(window)}"
        fresh = queries.pop("fresh", None) or _first_selector(
            queries.get("samples", queries["value"])
        )
        age = self._freshness(spec, fresh, pool, now) if fresh is not None else None
        value_answer = self._ask(queries["value"], now)
        samples = None
        if "samples" in queries:
            answer = self._ask(queries["samples"], now)
            if not answer.series:
                # An absent value series is permanent, no samples yet may be a quiet minute:
                # name the absent one first.
                self._explain_absence(
                    spec, answer.query, pool, now, f"samples of {where}", also=queries["value"]
                )
            samples = self._samples(answer, where)
        if not value_answer.series:
            self._explain_absence(spec, value_answer.query, pool, now, where)
        value = self._value(value_answer, where, samples)
        buckets = None
        if spec.kind == "quantile" and "buckets" in queries:
            buckets = self._buckets(spec, self._ask(queries["buckets"], now), where)
        return _measurement(spec, queries, value, samples, age, buckets, now)

    # -- both pools in one query -----------------------------------------------------------

    def _measure_both(
        self, signal: str, spec: Signal, window: timedelta, now: datetime
    ) -> dict[Pool, Measurement]:
        """Both pools' measurements from one query per role, for the pools it settles."""
        try:
            joint = self._joint_queries(signal, spec, window)
        except ValueError:
            return {}  # asked per pool, which says what is wrong
        if joint is None:
            return {}
        try:
            answers = {role: self._ask(query, now) for role, (query, _) in joint.items()}
            by_pool = {
                role: _split(answers[role], label, role == "buckets")
                for role, (_, label) in joint.items()
            }
        except MeasurementError:
            return {}
        queries = {role: query for role, (query, _) in joint.items()}
        found: dict[Pool, Measurement] = {}
        for pool in POOLS:
            share = {role: by_pool[role].get(pool, _Answer(q, [])) for role, q in queries.items()}
            where = f"{signal} on {pool} over the last {promql_duration(window)}"
            # What the joint answer cannot settle is asked again alone, which explains it.
            with contextlib.suppress(MeasurementError):
                measured = self._settled(spec, queries, share, where, now)
                # The evidence names the pool's own query, which is what the value answers.
                own = {
                    role: render(text, pool=pool, window=window, labels=self.labels)
                    for role, text in spec.queries().items()
                    if role != "fresh"
                }
                raw = {**measured.raw, "queries": _evidence(own), "asked_jointly": queries}
                found[pool] = replace(measured, query=own["value"], raw=raw)
        return found

    def _joint_queries(
        self, signal: str, spec: Signal, window: timedelta
    ) -> dict[str, tuple[str, str]] | None:
        """The signal's queries by role, each for both pools with its pool label, or
        ``None`` when one of them cannot be asked that way (kept per signal and window)."""
        key = (signal, window)
        if key in self._joint:
            return self._joint[key]
        templates = spec.queries()
        fresh = templates.pop("fresh", None)
        joint: dict[str, tuple[str, str]] | None = {}
        for role, template in templates.items():
            found = both_pools(template, window, self.labels)
            if found is None or joint is None:
                joint = None
                break
            joint[role] = found
        if joint is not None:
            selector = (
                both_pools_selector(fresh, self.labels)
                if fresh is not None
                else _first_joint_selector(joint.get("samples", joint["value"]))
            )
            if selector is None:
                joint = None
            else:
                joint["fresh"] = (f"max by ({selector[1]}) (timestamp({selector[0]}))", selector[1])
        if len(self._joint) > _KEEP_AT_MOST:
            self._joint.clear()
        self._joint[key] = joint
        return joint

    def _settled(
        self,
        spec: Signal,
        queries: Mapping[str, str],
        answer: Mapping[str, _Answer],
        where: str,
        now: datetime,
    ) -> Measurement:
        """One pool's measurement from its share of the joint answers.

        :raises MeasurementError: anything short of a fresh, finite answer in every role.
        """
        newest = self._number(answer["fresh"], f"newest sample of {where}")
        age = now.timestamp() - newest
        if age > self.stale_after.total_seconds():
            raise MeasurementError(f"{where}: stale", query=queries["fresh"])
        samples = self._samples(answer["samples"], where) if "samples" in answer else None
        value = self._value(answer["value"], where, samples)
        buckets = self._buckets(spec, answer["buckets"], where) if "buckets" in answer else None
        if spec.kind != "quantile":
            buckets = None
        fields = {role: query for role, query in queries.items() if role != "fresh"}
        return _measurement(spec, fields, value, samples, age, buckets, now)

    # -- stale and absent ------------------------------------------------------------------

    def _freshness(self, spec: Signal, selector: str, pool: Pool, now: datetime) -> float:
        """The age in seconds of the newest sample of ``selector``.

        :raises MeasurementError: it has none within two scrape intervals (the pool is not
            being scraped: its counts are frozen, not data), or it does not exist at all.
        """
        answer = self._ask(f"max(timestamp({selector}))", now)
        limit = self.stale_after.total_seconds()
        if answer.series:
            newest = _float(answer.series[0][1], answer.query)
            if not math.isfinite(newest):
                raise MeasurementError(
                    f"the newest sample of {selector} has no time ({answer.series[0][1]})",
                    query=answer.query,
                )
            age = now.timestamp() - newest
            if age <= limit:
                return age
            since = datetime.fromtimestamp(newest, tz=now.tzinfo).isoformat(timespec="seconds")
            raise MeasurementError(
                f"no fresh samples from the {pool} pool since {since}: the newest sample of "
                f"{selector} is {age:.0f} s old (more than two scrape intervals, {limit:g} s)",
                query=answer.query,
            )
        recent = self._ask(f"count(count_over_time({selector}[{_RECENTLY}]))", now)
        if recent.series:
            raise MeasurementError(
                f"no fresh samples from the {pool} pool: {selector} stopped being scraped (no "
                f"sample in the last 5 m, some in the last {_RECENTLY})",
                query=answer.query,
            )
        self._explain_absence(spec, selector, pool, now, f"{selector}")

    def _explain_absence(
        self, spec: Signal, query: str, pool: Pool, now: datetime, where: str, also: str = ""
    ) -> NoReturn:
        """Raise for a query that matched nothing, naming the series that does not exist in
        it or in ``also`` (another query of the same signal).

        :raises MeasurementError: always.
        """
        hint = f" ({spec.absent.strip()})" if spec.absent.strip() else ""
        for name, matchers in _selectors(f"{query} {also}"):
            selector = f"{name}{{{matchers}}}"
            if self._ask(f"count({selector})", now).series:
                continue
            why = self._why_absent(name, matchers, pool, now)
            raise MeasurementError(f"no series for {selector}: {why}{hint}", query=query)
        raise MeasurementError(
            f"no data for {where}: the query matched no series although each series it "
            "selects exists (no traffic in the window?)",
            query=query,
        )

    def _why_absent(self, name: str, matchers: str, pool: Pool, now: datetime) -> str:
        if not self._ask(f"count({{__name__={_quoted(name)}}})", now).series:
            return f"Prometheus has no {name} at all"
        pooled = [
            f'{label}{op}"{value}"'
            for label, op, value in _MATCHER.findall(matchers)
            if op == "=" and label in (self.labels.pool_label, self.labels.gateway_pool_label)
        ]
        if pooled and not self._ask(f"count({name}{{{','.join(pooled)}}})", now).series:
            return (
                f"{name} exists, but not on the {pool} pool ({', '.join(pooled)}): the pool's "
                "engines do not export it, or their targets lack the label"
            )
        others = [
            f'{label}{op}"{value}"'
            for label, op, value in _MATCHER.findall(matchers)
            if f'{label}{op}"{value}"' not in pooled
        ]
        return f"{name} exists on the {pool} pool, but none with {', '.join(others) or 'them'}"

    # -- asking ----------------------------------------------------------------------------

    def _ask(self, query: str, now: datetime) -> _Answer:
        def instant(params: dict[str, str], timeout: float) -> Any:
            params["time"] = f"{now.timestamp():.3f}"
            return self._client.custom_query(query, params=params, timeout=timeout)

        return _Answer(query, _series(self._request(query, instant), query))

    def _ask_range(self, query: str, start: datetime, end: datetime, step: timedelta) -> Any:
        """The raw matrix of a range query: each series' labels and ``values``."""

        def ranged(params: dict[str, str], timeout: float) -> Any:
            # The client rounds start and end to seconds; its params win over its own.
            params.update(start=f"{start.timestamp():.3f}", end=f"{end.timestamp():.3f}")
            step_s = f"{step.total_seconds():g}s"
            return self._client.custom_query_range(
                query, start, end, step_s, params=params, timeout=timeout
            )

        return self._request(query, ranged)

    def cells(
        self, signal: str, pool: Pool, window: timedelta, now: datetime, slice: timedelta
    ) -> list[Cell]:
        """Per replica and ``slice`` of ``window`` ending at ``now``: the signal's latency
        histogram increase and the replica's requests in flight at each scrape (two range
        queries), joined by ``rolloutd.metrics.cells``.

        :raises MeasurementError: the signal has no per-replica queries, a query failed, or
            the two answers name no replica in common.
        """
        spec = self.templates.signals.get(signal)
        if spec is None or spec.replica_buckets is None or spec.replica_load is None:
            raise MeasurementError(
                f"{signal} in {self.templates.source} has no per-replica queries "
                "(replica_buckets and replica_load): it cannot be judged at matched load"
            )
        try:
            buckets_query = render(
                spec.replica_buckets, pool=pool, window=slice, labels=self.labels
            )
            load_query = render(spec.replica_load, pool=pool, window=slice, labels=self.labels)
        except ValueError as exc:
            raise MeasurementError(f"{signal}: {exc}") from None
        slices = max(1, int(window / slice))
        start = now - slice * (slices - 1)
        scrape = self.stale_after / 2
        return cells_from_ranges(
            pool,
            (buckets_query, self._ask_range(buckets_query, start, now, slice)),
            (load_query, self._ask_range(load_query, start - slice, now, scrape)),
            slice_seconds=slice.total_seconds(),
            scale=spec.scale,
        )

    def _request(self, query: str, call: Callable[[dict[str, str], float], Any]) -> Any:
        """``call(params, timeout)``'s answer, or a :class:`MeasurementError` saying why not."""
        timeout = time_left(self.timeout, query)  # no more than the tick's budget has left
        # Prometheus reads whole units only: 4s, or 734ms when a budget cut the timeout.
        wait = f"{timeout:g}s" if timeout == int(timeout) else f"{max(1, int(timeout * 1000))}ms"
        try:
            result: Any = call({"timeout": wait}, timeout)
        except PrometheusApiClientException as exc:
            raise MeasurementError(self._refusal(str(exc)), query=query) from None
        except ValueError as exc:
            # A 200 whose body is not the API's JSON: a proxy's page, a truncated answer.
            raise MeasurementError(
                f"Prometheus at {self.label} answered with something other than its JSON "
                f"API ({type(exc).__name__})",
                query=query,
            ) from None
        except (KeyError, TypeError):
            raise MeasurementError(
                f"Prometheus at {self.label} answered without data.result", query=query
            ) from None
        except OSError as exc:
            raise MeasurementError(self._unreachable(exc, timeout), query=query) from None
        return result

    def _refusal(self, message: str) -> str:
        # The client's message is "HTTP Status Code 400 (b'<body>')": read the API's error.
        status = _STATUS.match(message)
        code = f"HTTP {status.group(1)}" if status else "an error"
        return f"Prometheus at {self.label} answered {code}: {_api_error(message)}"

    def _unreachable(self, exc: OSError, timeout: float) -> str:
        # requests' exceptions are OSErrors; match their names rather than import requests,
        # which ships no type information here.
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"Timeout", "ReadTimeout", "ConnectTimeout"} or "timed out" in str(exc):
            return f"Prometheus at {self.label} did not answer within {timeout:.3g}s"
        errno = _ERRNO.search(str(exc))
        why = errno.group(1).strip().lower() if errno else type(exc).__name__
        return f"cannot connect to Prometheus at {self.label}: {why}"

    # -- reading answers -------------------------------------------------------------------

    def _number(self, answer: _Answer, what: str) -> float:
        if not answer.series:
            raise MeasurementError(
                f"no data for {what}: the query matched no series (is the "
                f"{self.pool_label!r} label set in the scrape config?)",
                query=answer.query,
            )
        if len(answer.series) > 1:
            labels = ", ".join(str(labels) for labels, _ in answer.series[:3])
            raise MeasurementError(
                f"{what}: the query returned {len(answer.series)} series, expected one "
                f"(aggregate with sum() or max()): {labels}",
                query=answer.query,
            )
        value = _float(answer.series[0][1], answer.query)
        if not math.isfinite(value):
            raise MeasurementError(f"{what} is {answer.series[0][1]}", query=answer.query)
        return value

    def _value(self, answer: _Answer, where: str, samples: float | None) -> float:
        if samples == 0 and answer.series and not _finite(answer.series[0][1]):
            raise MeasurementError(
                f"{where}: no traffic in the window (0 samples)", query=answer.query
            )
        return self._number(answer, where)

    def _samples(self, answer: _Answer, where: str) -> float:
        samples = self._number(answer, f"samples of {where}")
        if samples < 0:
            raise MeasurementError(
                f"samples of {where} is negative ({samples:g})", query=answer.query
            )
        return samples

    def _buckets(self, spec: Signal, answer: _Answer, where: str) -> list[list[str | float]]:
        query = answer.query
        buckets: list[tuple[float, float]] = []
        for labels, text in answer.series:
            if "le" not in labels:
                raise MeasurementError(
                    f"buckets of {where}: a series without an 'le' label", query=query
                )
            count = _float(text, query)
            bound = _float(labels["le"], query)
            if not math.isfinite(count) or math.isnan(bound):
                raise MeasurementError(
                    f"buckets of {where}: bucket {labels['le']} is {text}", query=query
                )
            buckets.append((bound, count))
        buckets.sort()
        if not buckets or buckets[-1][0] != math.inf:
            raise MeasurementError(f'buckets of {where}: no le="+Inf" bucket', query=query)
        total = buckets[-1][1]
        finite = [count for bound, count in buckets if math.isfinite(bound)]
        q = spec.q if spec.q is not None else 0.5
        if finite and total > 0 and total - finite[-1] > (1 - q) * total:
            # histogram_quantile would return the last finite bound: a floor, not the value.
            last = max(bound for bound, _ in buckets if math.isfinite(bound)) * spec.scale
            raise MeasurementError(
                f"{where}: the p{q * 100:g} lies above the histogram's last finite bucket "
                f"({last:g}); the histogram cannot tell how far",
                query=query,
            )
        return [
            ["+Inf" if math.isinf(bound) else f"{bound * spec.scale:g}", count]
            for bound, count in buckets
        ]


def _selectors(query: str) -> list[tuple[str, str]]:
    """The distinct (metric name, matchers) vector selectors of ``query``, in order."""
    seen: list[tuple[str, str]] = []
    for name, matchers in _SELECTOR.findall(query):
        if (name, matchers) not in seen:
            seen.append((name, matchers))
    return seen


def _first_selector(query: str) -> str | None:
    found = _selectors(query)
    return f"{found[0][0]}{{{found[0][1]}}}" if found else None


def _first_joint_selector(joint: tuple[str, str]) -> tuple[str, str] | None:
    selector = _first_selector(joint[0])
    return None if selector is None or f"{joint[1]}=~" not in selector else (selector, joint[1])


def _split(answer: _Answer, label: str, buckets: bool) -> dict[Pool, _Answer]:
    """A joint answer's series per pool, without the pool label.

    :raises MeasurementError: a series with other labels or none (the query's shape kept
        more than the pool apart), or a pool with several series where one is expected.
    """
    allowed = {label, "le"} if buckets else {label}
    found: dict[Pool, list[tuple[dict[str, str], str]]] = {}
    for labels, text in answer.series:
        pool = next((p for p in POOLS if p == labels.get(label)), None)
        if pool is None or set(labels) - allowed:
            raise MeasurementError("the joint answer is not split by pool", query=answer.query)
        rest = {name: value for name, value in labels.items() if name != label}
        found.setdefault(pool, []).append((rest, text))
    if not buckets and any(len(series) > 1 for series in found.values()):
        raise MeasurementError("the joint answer has several series a pool", query=answer.query)
    return {pool: _Answer(answer.query, series) for pool, series in found.items()}


def _measurement(
    spec: Signal,
    queries: Mapping[str, str],
    value: float,
    samples: float | None,
    age: float | None,
    buckets: list[list[str | float]] | None,
    now: datetime,
) -> Measurement:
    """A signal's measurement with its evidence: the queries, samples, age and buckets."""
    raw: dict[str, Any] = {"at": now.isoformat(), "value": value, "samples": samples}
    if age is not None:
        raw["newest_sample_age_s"] = round(age, 3)
    if spec.kind in _COUNTING:
        # increase() extrapolates to the window's edges; an event count is a whole number.
        value = float(round(value))
    if spec.kind == "quantile":
        value *= spec.scale
        if buckets is not None:
            raw["buckets"] = buckets
    raw["queries"] = _evidence(queries)
    return Measurement(
        value,
        None if samples is None else round(samples),
        query=queries["value"],
        raw=raw,
    )


def _evidence(queries: Mapping[str, str]) -> dict[str, str]:
    """The queries kept as evidence beside the value's own."""
    return {role: q for role, q in queries.items() if role not in ("value", "fresh")}


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _series(result: Any, query: str) -> list[tuple[dict[str, str], str]]:
    """The (labels, value) pairs of an instant vector or scalar answer."""
    if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
        return [({}, str(result[1]))]  # a scalar: [time, "value"]
    if not isinstance(result, list):
        raise MeasurementError("Prometheus answered an unknown result type", query=query)
    series = []
    for item in result:
        if not isinstance(item, Mapping) or "value" not in item:
            # A range vector ("values") or a string: templates must be instant queries.
            raise MeasurementError(
                "the query is not an instant vector or scalar (a range selector "
                "without a function around it?)",
                query=query,
            )
        labels = {str(k): str(v) for k, v in dict(item.get("metric") or {}).items()}
        series.append((labels, str(item["value"][1])))
    return series


def _api_error(message: str) -> str:
    """The ``error`` of the API's JSON body inside the client's message, else the message."""
    _, _, body = message.partition(" (")
    try:
        document = json.loads(ast.literal_eval(body.removesuffix(")")))
        return str(document["error"])
    except (ValueError, SyntaxError, TypeError, KeyError, MemoryError, RecursionError):
        return message[:300]


def _float(text: str, query: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MeasurementError(f"Prometheus sent {text!r}, not a number", query=query) from None


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _without_credentials(url: str) -> str:
    """``url`` without a user or password, for messages, logs and evidence."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
