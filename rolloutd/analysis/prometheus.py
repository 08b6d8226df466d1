"""Gate signals from Prometheus: the signal's templates, rendered and asked at ``now``.

Each measurement runs the signal's queries (value, samples, buckets) as instant queries
evaluated at the ``now`` the caller gives, so a scaled or fake clock asks about the moment
it means. Whatever is not one finite number -- an HTTP or PromQL error, a timeout, a refused
connection, an empty answer, NaN, an infinity -- is a :class:`MeasurementError` carrying the
query, never a value: a gate must not pass on missing data.

``prometheus_api_client`` (and through it ``requests``) is imported here only, so the CLI
never pays for it.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from rolloutd.analysis.base import Measurement, MeasurementError, Pool
from rolloutd.analysis.templates import Signal, Templates, promql_duration, render

_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")
_STATUS = re.compile(r"HTTP Status Code (\d+)")
_COUNTING = ("events", "count")


@dataclass(frozen=True)
class _Answer:
    """One instant query's answer: the series it returned as (labels, value text)."""

    query: str
    series: list[tuple[dict[str, str], str]]


class PrometheusMetrics:
    """A :class:`~rolloutd.analysis.base.MetricsSource` over the Prometheus HTTP API."""

    def __init__(
        self,
        url: str,
        templates: Templates,
        *,
        pool_label: str = "pool",
        timeout: timedelta = timedelta(seconds=10),
        disable_ssl: bool = False,
    ) -> None:
        """A source asking ``url``; no request is made before the first ``measure``.

        :raises ValueError: ``pool_label`` is not a label name, or ``timeout`` not positive.
        """
        render("{pool}", pool="stable", window="1s", pool_label=pool_label)  # validates it
        if timeout <= timedelta(0):
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.url = url.rstrip("/")
        self.label = _without_credentials(self.url)
        self.templates = templates
        self.pool_label = pool_label
        self.timeout = timeout.total_seconds()
        # No retries inside a tick (the next tick asks again, and a tick must stay short);
        # read=False hands back a read timeout as itself rather than as a connection error.
        self._client = PrometheusConnect(
            self.url,
            disable_ssl=disable_ssl,
            retry=Retry(total=0, read=False, raise_on_status=False),
        )

    def measure(self, signal: str, pool: Pool, window: timedelta, now: datetime) -> Measurement:
        """The value of ``signal`` on ``pool`` over ``window`` ending at ``now``.

        :raises MeasurementError: unknown signal, bad window, or no finite answer.
        """
        spec = self.templates.signals.get(signal)
        if spec is None:
            known = ", ".join(sorted(self.templates.signals))
            raise MeasurementError(
                f"no signal {signal!r} in {self.templates.source} (it defines: {known})"
            )
        try:
            queries = {
                role: render(text, pool=pool, window=window, pool_label=self.pool_label)
                for role, text in spec.queries().items()
            }
        except ValueError as exc:
            raise MeasurementError(f"{signal}: {exc}") from None
        where = f"{signal} on {pool} over the last {promql_duration(window)}"
        value_answer = self._ask(queries["value"], now)
        samples = None
        if "samples" in queries:
            samples = self._number(self._ask(queries["samples"], now), f"samples of {where}")
            if samples < 0:
                raise MeasurementError(
                    f"samples of {where} is negative ({samples:g})", query=queries["samples"]
                )
        value = self._value(value_answer, where, samples)
        raw: dict[str, Any] = {"at": now.isoformat(), "value": value, "samples": samples}
        if spec.kind in _COUNTING:
            # increase() extrapolates to the window's edges; an event count is a whole number.
            value = float(round(value))
        if spec.kind == "quantile":
            value *= spec.scale
            if "buckets" in queries:
                raw["buckets"] = self._buckets(spec, queries["buckets"], now, where)
        raw["queries"] = {role: q for role, q in queries.items() if role != "value"}
        return Measurement(
            value,
            None if samples is None else round(samples),
            query=queries["value"],
            raw=raw,
        )

    # -- asking ----------------------------------------------------------------------------

    def _ask(self, query: str, now: datetime) -> _Answer:
        params = {"time": f"{now.timestamp():.3f}", "timeout": f"{self.timeout:g}s"}
        try:
            result: Any = self._client.custom_query(query, params=params, timeout=self.timeout)
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
            raise MeasurementError(self._unreachable(exc), query=query) from None
        return _Answer(query, _series(result, query))

    def _refusal(self, message: str) -> str:
        # The client's message is "HTTP Status Code 400 (b'<body>')": read the API's error.
        status = _STATUS.match(message)
        code = f"HTTP {status.group(1)}" if status else "an error"
        return f"Prometheus at {self.label} answered {code}: {_api_error(message)}"

    def _unreachable(self, exc: OSError) -> str:
        # requests' exceptions are OSErrors; match their names rather than import requests,
        # which ships no type information here.
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"Timeout", "ReadTimeout", "ConnectTimeout"} or "timed out" in str(exc):
            return f"Prometheus at {self.label} did not answer within {self.timeout:g}s"
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

    def _buckets(
        self, spec: Signal, query: str, now: datetime, where: str
    ) -> list[list[str | float]]:
        answer = self._ask(query, now)
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
