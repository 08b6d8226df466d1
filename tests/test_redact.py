"""The secret scrubber: known secrets and URL passwords vanish from any value, however nested."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rolloutd import redact
from rolloutd.redact import register_secret, scrub, scrub_value

TOKEN = "s3cr3t-token-value"
HOOK = f"https://hooks.slack.com/services/{TOKEN}"
DB_URL = "postgresql://ops:hunter2@db.internal/rolloutd"


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A registry of secrets of this test alone, holding the webhook token."""
    monkeypatch.setattr(redact, "_secrets", set())
    register_secret(TOKEN)
    yield


def test_a_string_loses_registered_secrets_and_url_passwords() -> None:
    """The top-level case: a secret and a URL password in one string both become ***."""
    assert scrub(f"{HOOK} and {DB_URL}") == (
        "https://hooks.slack.com/services/*** and postgresql://ops:***@db.internal/rolloutd"
    )


def test_nested_dicts_and_lists_are_scrubbed_at_every_level() -> None:
    """Strings inside dicts inside lists inside dicts (keys included) are scrubbed."""
    value = {
        "response": {"body": [f"posted to {HOOK}", {"url": DB_URL, "attempt": 3}]},
        "argv": ("deploy", f"--token={TOKEN}"),
        f"key-{TOKEN}": None,
    }

    scrubbed = scrub_value(value)

    assert scrubbed == {
        "response": {
            "body": [
                "posted to https://hooks.slack.com/services/***",
                {"url": "postgresql://ops:***@db.internal/rolloutd", "attempt": 3},
            ]
        },
        "argv": ("deploy", "--token=***"),
        "key-***": None,
    }
    assert TOKEN in value["argv"][1]  # the caller's value is left as it was


def test_an_exception_becomes_its_scrubbed_message() -> None:
    """An exception (alone or in a list) is shown as its type and its message, scrubbed."""
    error = ConnectionError(f"cannot reach {DB_URL} for {HOOK}")

    assert scrub_value([error]) == [
        "ConnectionError: cannot reach postgresql://ops:***@db.internal/rolloutd for "
        "https://hooks.slack.com/services/***"
    ]


def test_other_objects_become_their_scrubbed_repr_and_plain_values_pass() -> None:
    """An object is scrubbed as the repr a renderer would print; numbers and None are kept."""

    class Hook:
        def __repr__(self) -> str:
            return f"Hook({HOOK!r})"

    assert scrub_value(Hook()) == "Hook('https://hooks.slack.com/services/***')"
    assert scrub_value({TOKEN[:3]: 1.5, "n": 2, "ok": True, "none": None}) == {
        "s3c": 1.5,
        "n": 2,
        "ok": True,
        "none": None,
    }
    assert scrub_value({f"a{TOKEN}"}) == ["a***"]


def test_a_structure_that_contains_itself_is_scrubbed_without_recursing_forever() -> None:
    """A list holding itself ends as scrubbed text once the walk is deep enough."""
    loop: list[object] = [TOKEN]
    loop.append(loop)

    scrubbed = scrub_value(loop)

    assert TOKEN not in repr(scrubbed)
