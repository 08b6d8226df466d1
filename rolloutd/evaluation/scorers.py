"""The built-in scorers of a reference answer: ``exact`` and ``token_f1``, SQuAD's two metrics.

Both compare the answer with each of the case's reference answers after SQuAD's
normalisation (lower case, punctuation and the articles a/an/the removed, whitespace
collapsed) and keep the best: a case may accept more than one wording. ``exact`` is 1.0 or
0.0; ``token_f1`` is the harmonic mean of the precision and recall of the answer's tokens
against the reference's, counted as multisets, in [0, 1].
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)

Scorer = Callable[[str, Sequence[str]], float]
"""A built-in scorer: (answer, references) to a score in [0, 1]."""


def normalise_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    lowered = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def exact_match(answer: str, references: Sequence[str]) -> float:
    """1.0 when the normalised answer equals a normalised reference, else 0.0."""
    normalised = normalise_answer(answer)
    return float(any(normalised == normalise_answer(ref) for ref in references))


def token_f1(answer: str, references: Sequence[str]) -> float:
    """The best token F1 of the answer against any reference (SQuAD's definition)."""
    return max((_f1(answer, ref) for ref in references), default=0.0)


def _f1(answer: str, reference: str) -> float:
    got, want = normalise_answer(answer).split(), normalise_answer(reference).split()
    if not got or not want:
        # Both empty is a match; one empty is not.
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


BUILT_IN: dict[str, Scorer] = {"exact": exact_match, "token_f1": token_f1}
"""The scorers that need no model, by the name a plan gives them."""
