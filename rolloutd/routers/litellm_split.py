"""The session split the LiteLLM plugin applies, and the weights file rolloutd hands it.

Shared by both sides of the file: the ``litellm`` driver writes :class:`GroupWeights` as
JSON (one file per model group, replaced atomically), the plugin inside the proxy reads it
and picks each request's pool with :func:`pool_for`. Nothing here imports LiteLLM.

The pick is a hash of the model group and the session id to one of 10,000 buckets; the
session goes to the canary when its bucket is below ``weight x 100``. So a session keeps its
pool while the weight holds, raising the weight from w1 to w2 moves exactly the sessions
whose bucket lies in ``[w1, w2)`` — about ``w2 - w1`` percent, every one of them from stable
to the canary — and 0% and 100% are exact. The group salts the hash so that two rollouts on
one proxy do not put the same users on both canaries.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from rolloutd.routers.base import check_weight

Pool = Literal["stable", "canary"]
BUCKETS = 10_000
POOL_KEY = "rolloutd_pool"
"""The ``model_info`` key that puts a deployment of the proxy's config in a pool."""
DEFAULT_HEADER = "X-Session-Id"


def bucket(group: str, session: str) -> int:
    """The session's place, 0 to 9,999, in the group's split."""
    digest = hashlib.sha256(f"{group}\0{session}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def pool_for(
    weight: int, group: str, session: str | None, rng: random.Random | None = None
) -> Pool:
    """The pool a request of ``session`` goes to at ``weight`` percent canary.

    A request without a session id is split per request by weight (``rng``), as HAProxy
    splits header-less requests: there is no session to keep together.
    """
    if session is None or session == "":
        draw = (rng or random).randrange(BUCKETS)
    else:
        draw = bucket(group, session)
    return "canary" if draw < weight * (BUCKETS // 100) else "stable"


@dataclass(frozen=True)
class GroupWeights:
    """What one model group's split is: the canary's percent of sessions and mirroring."""

    model_group: str
    canary_weight: int
    mirror: bool = False
    session_header: str = DEFAULT_HEADER
    epoch: int | None = None
    updated_at: str | None = None

    def to_json(self) -> str:
        """The document the driver writes."""
        document = {
            "model_group": self.model_group,
            "canary_weight": self.canary_weight,
            "stable_weight": 100 - self.canary_weight,
            "mirror": self.mirror,
            "session_header": self.session_header,
            "epoch": self.epoch,
            "updated_at": self.updated_at,
        }
        return json.dumps(document, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> GroupWeights:
        """Parse a weights document.

        :raises ValueError: naming the field that is missing or wrong.
        """
        try:
            document: Any = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        group = document.get("model_group")
        if not isinstance(group, str) or not group:
            raise ValueError(f"model_group {group!r} is not a model group name")
        try:
            weight = check_weight(document.get("canary_weight"))  # type: ignore[arg-type]
        except ValueError:
            raise ValueError(
                f"canary_weight {document.get('canary_weight')!r} is not a whole percent 0-100"
            ) from None
        mirror = document.get("mirror", False)
        header = document.get("session_header", DEFAULT_HEADER)
        epoch = document.get("epoch")
        if not isinstance(mirror, bool):
            raise ValueError(f"mirror {mirror!r} is not true or false")
        if not isinstance(header, str) or not header:
            raise ValueError(f"session_header {header!r} is not a header name")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
            raise ValueError(f"epoch {epoch!r} is not a whole number")
        updated = document.get("updated_at")
        return cls(
            group, weight, mirror, header, epoch, updated if isinstance(updated, str) else None
        )
