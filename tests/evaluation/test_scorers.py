"""Tests of the built-in reference scorers: exact match and token F1 after SQuAD normalisation."""

from __future__ import annotations

import pytest

from rolloutd.evaluation.scorers import exact_match, normalise_answer, token_f1


def test_normalisation_drops_case_punctuation_articles_and_extra_spaces() -> None:
    """SQuAD's normalisation: 'The  60-day window!' becomes '60day window'."""
    assert normalise_answer("The  60-day window!") == "60day window"
    assert normalise_answer("An apple, a pear") == "apple pear"


def test_exact_match_after_normalisation_against_any_reference() -> None:
    """Spelling differences that normalise away match; other words do not."""
    assert exact_match("the 60 days.", ["60 Days"]) == 1.0
    assert exact_match("90 days", ["60 days", "sixty days"]) == 0.0
    assert exact_match("Sixty days", ["60 days", "sixty days"]) == 1.0


def test_token_f1_is_squads() -> None:
    """Precision 2/3 and recall 2/4 give F1 4/7; no shared token, 0; the best reference wins."""
    assert token_f1("refund within days", ["a refund within 60 working"]) == pytest.approx(4 / 7)
    assert token_f1("refund within 60", ["refund within 60 working days"]) == pytest.approx(0.75)
    assert token_f1("nothing shared", ["entirely different"]) == 0.0
    assert token_f1("60 days", ["no", "60 days"]) == 1.0


def test_repeated_tokens_count_as_a_multiset() -> None:
    """'days days days' shares one 'days' with 'two days', not three."""
    assert token_f1("days days days", ["two days"]) == pytest.approx(
        2 * (1 / 3) * 0.5 / (1 / 3 + 0.5)
    )


def test_empty_answers() -> None:
    """An empty answer scores 0 against a reference, 1 against an empty (all-article) one."""
    assert token_f1("", ["60 days"]) == 0.0
    assert token_f1("the", ["a"]) == 1.0
