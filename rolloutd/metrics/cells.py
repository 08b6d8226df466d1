"""Per-replica latency by load, from two Prometheus range answers.

A load-matched latency gate (``rolloutd.core.stats.matched``) needs, for every replica and
every slice of its window, the latency histogram's increase and the mean number of requests
the replica held. A signal's template gives both as range queries grouped by the replica's
labels (``replica_buckets``: ``sum by (instance, le) (increase(..._bucket[{window}]))``;
``replica_load``: ``sum by (instance) (running) + sum by (instance) (waiting)``), evaluated
with ``{window}`` = the slice and a step of one slice, so each point is one slice; the load
gauge is asked at every scrape and its samples are summed up per slice here. The two
answers are joined on the replica's labels and the slice.

Absent is not zero here either: a slice where the load series has no point (the replica was
not scraped) is left out, not read as idle; a histogram with no requests in a slice adds
nothing; answers that share no replica are an error naming both queries' labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rolloutd.core.stats.matched import Cell
from rolloutd.gates.base import MeasurementError, Pool

Key = tuple[tuple[str, str], ...]


def cells_from_ranges(
    pool: Pool,
    buckets: tuple[str, Any],
    load: tuple[str, Any],
    *,
    slice_seconds: float,
    scale: float = 1.0,
) -> list[Cell]:
    """Cells of one pool from the (query, matrix) answers of the two range queries: the
    histogram's increase per slice, and the in-flight gauge at every scrape.

    A cell's load is the concurrency its requests met: the in-flight samples of its slice
    weighted by themselves (``sum(n^2) / sum(n)``, the time-average of what a request in
    flight sees), at least 1 (a request sees itself). An idle replica's slice average is
    near 0 although each of its requests ran at 1; this is what tells a canary at 5% that
    serves one request at a time from a stable replica that serves eight.

    :raises MeasurementError: an answer that is not a matrix, a series of buckets without
        ``le``, a value that is not a number, or no replica in both answers.
    """
    buckets_query, buckets_matrix = buckets
    load_query, load_matrix = load
    histograms: dict[tuple[Key, float], list[tuple[float, float]]] = {}
    for labels, points in _matrix(buckets_matrix, buckets_query):
        if "le" not in labels:
            raise MeasurementError("a replica bucket series has no 'le' label", query=buckets_query)
        edge = _number(labels.pop("le"), buckets_query)
        key = _key(labels)
        for at, text in points:
            count = _number(text, buckets_query)
            if math.isfinite(count):  # a NaN increase: the series started inside the slice
                edge_scaled = edge * scale if math.isfinite(edge) else edge
                histograms.setdefault((key, at), []).append((edge_scaled, count))
    samples: dict[Key, list[tuple[float, float]]] = {}
    for labels, points in _matrix(load_matrix, load_query):
        key = _key(labels)
        for at, text in points:
            value = _number(text, load_query)
            if math.isfinite(value) and value >= 0:
                samples.setdefault(key, []).append((at, value))
    loads = {
        (key, at): seen
        for key, at in histograms
        if (seen := _seen(samples.get(key, []), at - slice_seconds, at)) is not None
    }
    replicas_b = {key for key, _ in histograms}
    replicas_l = set(samples)
    if histograms and loads and not replicas_b & replicas_l:
        raise MeasurementError(
            f"the per-replica latency and load answers share no replica (latency by "
            f"{_names(replicas_b)}, load by {_names(replicas_l)}): group both by the same labels",
            query=load_query,
        )
    found = []
    for (key, at), rows in sorted(histograms.items()):
        held = loads.get((key, at))
        if held is None:
            continue  # no load point for that slice: unknown load, not zero
        rows.sort()
        found.append(Cell(pool, held, tuple(rows), _replica(key)))
    return found


def _seen(points: list[tuple[float, float]], after: float, until: float) -> float | None:
    """The concurrency requests met in ``(after, until]``, or None: no sample there."""
    inside = [n for at, n in points if after < at <= until]
    if not inside:
        return None
    busy = sum(inside)
    return max(1.0, sum(n * n for n in inside) / busy) if busy else 1.0


def _matrix(result: Any, query: str) -> list[tuple[dict[str, str], list[tuple[float, str]]]]:
    if not isinstance(result, list):
        raise MeasurementError("Prometheus answered a range query with no matrix", query=query)
    series = []
    for item in result:
        if not isinstance(item, Mapping) or not isinstance(item.get("values"), list):
            raise MeasurementError("a range answer's series has no 'values'", query=query)
        labels = {str(k): str(v) for k, v in dict(item.get("metric") or {}).items()}
        points = []
        for point in item["values"]:
            if not isinstance(point, list | tuple) or len(point) != 2:
                raise MeasurementError(f"a range answer's point is {point!r}", query=query)
            points.append((float(point[0]), str(point[1])))
        series.append((labels, points))
    return series


def _number(text: str, query: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MeasurementError(f"Prometheus sent {text!r}, not a number", query=query) from None


def _key(labels: Mapping[str, str]) -> Key:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def _replica(key: Key) -> str:
    return ",".join(f"{k}={v}" for k, v in key) or "(one series)"


def _names(keys: set[Key]) -> str:
    names = sorted({k for key in keys for k, _ in key})
    return "{" + ", ".join(names) + "}"
