"""Tests of how an actor is named: the claimed name, and the database role when it differs."""

from __future__ import annotations

from rolloutd.core.actors import ACTOR_LENGTH, acting


def test_the_role_is_shown_only_when_known_and_different() -> None:
    """No role (SQLite) or the same name: the claimed name alone; else both."""
    assert acting("alice", None) == "alice"
    assert acting("alice", "alice") == "alice"
    assert acting("root", "rolloutd_operator") == "root (as db role rolloutd_operator)"


def test_a_long_claimed_name_is_shortened_so_the_role_always_fits() -> None:
    """However long the claimed name, the result fits an event's actor and keeps the role."""
    shown = acting("x" * 500, "rolloutd_operator")
    assert len(shown) <= ACTOR_LENGTH and shown.endswith("(as db role rolloutd_operator)")
