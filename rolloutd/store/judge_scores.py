"""The LLM judge's scores, kept by cache key so that each answer is judged once.

Rows in, rows out: which answers the keys stand for is
:mod:`rolloutd.evaluation.judge`'s business (``judge_key``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rolloutd.store.suite_models import JudgeScore
from rolloutd.store.upserts import insert_on_conflict

# Keys per SELECT: well under the bound parameters either database takes in one statement.
_CHUNK = 500


def scores_of(session: Session, keys: Collection[str]) -> dict[str, float]:
    """The kept scores of ``keys`` (the keys with none are left out)."""
    wanted = sorted(set(keys))
    found: dict[str, float] = {}
    for start in range(0, len(wanted), _CHUNK):
        query = select(JudgeScore.key, JudgeScore.score).where(
            JudgeScore.key.in_(wanted[start : start + _CHUNK])
        )
        found.update((key, float(score)) for key, score in session.execute(query))
    return found


def keep_scores(session: Session, scores: Mapping[str, float], *, now: datetime) -> None:
    """Keep ``scores`` by key; a key kept already keeps its first score (a judge asked at
    temperature 0 about the same answer gives the same one)."""
    if not scores:
        return
    rows = [{"key": key, "score": score, "judged_at": now} for key, score in scores.items()]
    session.execute(insert_on_conflict(session, JudgeScore).values(rows).on_conflict_do_nothing())
