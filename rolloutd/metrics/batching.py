"""One PromQL query for both pools: a signal's template rewritten to answer ``by (pool)``.

A gate compares the canary with stable, so it asks every query of its signal twice, once per
pool. Where the template's shape allows, one query answers both: the pool matcher
``{pool_label}="{pool}"`` becomes ``=~"canary|stable"`` and every aggregation keeps the pool
label (``sum(`` becomes ``sum by (pool) (``, ``sum by (le) (`` becomes
``sum by (le, pool) (``), so a division of two sums matches pool with pool, as the two
single-pool queries did.

The rewrite is refused (``None``: ask per pool) for any shape where keeping one more label
could change an answer rather than split it: a ``{pool}`` outside an ``=`` matcher, pool
matchers on two different label names, a grouping modifier (``by``/``without`` after the
parentheses, ``without``), vector matching (``on``, ``ignoring``, ``group_left``,
``group_right``), an aggregation other than sum, min, max, avg and count, or a function that
drops or makes up labels (``absent``, ``scalar``, ``vector``, ``label_replace``, ...). The
source still checks every answer: each series must carry the pool label and nothing else
(``le`` besides, for buckets), at most one per pool; an answer that does not is asked again
per pool, so a shape this module misjudges costs a query, never a wrong value.
"""

from __future__ import annotations

import re
from datetime import timedelta

from rolloutd.gates.base import Pool
from rolloutd.metrics.templates import Labels, escape_label_value, render

POOLS: tuple[Pool, Pool] = ("canary", "stable")
# A pool value no pool has; rendered in place of {pool}, then replaced by the regex matcher.
_SENTINEL = "rolloutd-both-pools"
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"' + re.escape(_SENTINEL) + '"')
_AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|count|stddev|stdvar|group|topk|bottomk|quantile|count_values|limitk"
    r"|limit_ratio)\s*(?:by\s*\(([^()]*)\)\s*)?\("
)
_KEEPS_LABELS = {"sum", "min", "max", "avg", "count"}
_REFUSED = re.compile(
    r"\b(without|on|ignoring|group_left|group_right|absent|absent_over_time|scalar|vector"
    r"|label_replace|label_join|sort_by_label|sort_by_label_desc|info|time)\s*\("
    r"|\)\s*(by|without)\s*\("
)


def both_pools(template: str, window: timedelta, labels: Labels) -> tuple[str, str] | None:
    """``template`` as one query for both pools, and the label that tells them apart;
    ``None`` when its shape does not allow it.

    :raises ValueError: as :func:`~rolloutd.metrics.templates.render` does.
    """
    found = _pools_matched(template, window, labels)
    if found is None:
        return None
    text, label = found
    aggregations = list(_AGGREGATION.finditer(text))
    if not aggregations or any(m.group(1) not in _KEEPS_LABELS for m in aggregations):
        return None

    def keep_pool(match: re.Match[str]) -> str:
        grouped = [g.strip() for g in (match.group(2) or "").split(",") if g.strip()]
        grouped += [] if label in grouped else [label]
        return f"{match.group(1)} by ({', '.join(grouped)}) ("

    return _AGGREGATION.sub(keep_pool, text), label


def both_pools_selector(selector: str, labels: Labels) -> tuple[str, str] | None:
    """A series selector (a signal's ``fresh``) matching both pools, and the pool label;
    ``None`` when its shape does not allow it.

    :raises ValueError: as :func:`~rolloutd.metrics.templates.render` does.
    """
    return _pools_matched(selector, timedelta(minutes=1), labels)


def _pools_matched(template: str, window: timedelta, labels: Labels) -> tuple[str, str] | None:
    text = render(template, pool=_SENTINEL, window=window, labels=labels)
    matchers = _MATCHER.findall(text)
    names = {name for name, _ in matchers}
    if (
        len(names) != 1
        or any(op != "=" for _, op in matchers)
        or text.count(_SENTINEL) != len(matchers)
        or _REFUSED.search(text)
    ):
        return None
    pools = "|".join(escape_label_value(re.escape(pool)) for pool in POOLS)
    return _MATCHER.sub(lambda m: f'{m.group(1)}=~"{pools}"', text), names.pop()
