"""How a simulated engine answers a reference case: the reference, or now and then not.

The suite runner sends a reference case's acceptable answers as ``rolloutd_reference``
(real engines drop unknown fields). A faithful build answers with the first reference; the
``unfaithful_rate`` fault makes that share of answers unsupported by the context, as a
degraded build's would be: the reference's key facts dropped and a made-up one added, so
token-F1 and a judge both score it low. The draw is the caller's seeded generator, so an
answer is a function of the seed and the request.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

UNSUPPORTED = "Our policy may differ; please check the website or contact us for details."


def reference_answer(references: Sequence[str], rng: random.Random, unfaithful_rate: float) -> str:
    """The answer to a case whose acceptable answers are ``references``."""
    if rng.random() < unfaithful_rate:
        words = references[0].split()
        return " ".join([*words[: max(1, len(words) // 4)], UNSUPPORTED])
    return references[0]


def references_of(raw: object) -> list[str] | None:
    """The ``rolloutd_reference`` list of a request body, if it carries a usable one."""
    value = raw.get("rolloutd_reference") if isinstance(raw, dict) else None
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    return None
