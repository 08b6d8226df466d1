"""The secret scrubber: known secrets and URL passwords vanish from any value, however nested;
and every long piece of a secret vanishes from text its holder wrote, however it is written."""

from __future__ import annotations

import string
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutd import redact
from rolloutd.redact import SHORTEST_FRAGMENT, hide_fragments, register_secret, scrub, scrub_value

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


def test_a_long_text_without_a_url_is_scrubbed_in_linear_time() -> None:
    """Long runs of letters (a large answer body) do not make the URL-password search scan
    the run again from each of its characters."""
    texts = ["x" * 200_000, "a://" + "b" * 200_000, ("x://" + "u" * 1000) * 200]

    started = time.perf_counter()
    scrubbed = [scrub(text) for text in texts]

    assert time.perf_counter() - started < 1.0
    assert scrubbed == texts


SLACK_PATH = "/services/T0EXAMPLE1/B0EXAMPLE2/qK7vZ2mX9pL4wR8tYb3nHs6D"


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        pytest.param(
            f"The requested URL {SLACK_PATH} was not found",
            "The requested URL *** was not found",
            id="the path",
        ),
        pytest.param("bad token qK7vZ2mX9pL4wR8tYb3nHs6D", "bad token ***", id="the token"),
        pytest.param(
            '{"url":"https:\\/\\/hooks.example.com\\/services\\/t0example1\\/b0example2"}',
            '{"url":"https:\\/\\/hooks.example.com***"}',
            id="lower-cased in JSON",
        ),
        pytest.param(
            "no route for %2Fservices%2Ft0example1%2FB0EXAMPLE2",
            "no route for ***",
            id="percent-encoded",
        ),
        pytest.param("&#47;B0EXAMPLE2&#x2F;QK7V and /B0E", "*** and /B0E", id="HTML references"),
        pytest.param(
            "bytearray(b'HTTP/1.1 \\x2fservices\\x2fT0EX')",
            "bytearray(b'HTTP/1.1 ***')",
            id="a bytes repr",
        ),
        pytest.param("services", "***", id="eight characters"),
        pytest.param("service T0EXAMP", "service T0EXAMP", id="seven characters"),
    ],
)
def test_pieces_of_a_webhook_path_vanish_however_a_server_writes_them(
    said: str, shown: str
) -> None:
    """Eight or more characters of the path, in any case or escaping, become ***; shorter
    pieces stay."""
    assert hide_fragments(said, SLACK_PATH) == shown


def test_a_non_ascii_path_is_hidden_written_literally_or_percent_encoded() -> None:
    """A path character beyond ASCII matches both itself and its UTF-8 percent-encoding."""
    path = "/hooks/caf\u00e9-cr\u00e8me"

    assert hide_fragments("got /hooks/caf%C3%A9-cr%C3%A8me", path) == "got ***"
    assert hide_fragments("got /HOOKS/CAF\u00e9-cr\u00e8me!", path) == "got ***!"


# What a URL path is made of (as a client sends it), and text around it that has none of
# those characters and starts no escape, so where a fragment ends is certain.
PATH_CHARS = string.ascii_letters + string.digits + "-._~/"
AROUND = " \t\n:;,!?()[]{}<>'\"=*#@|^`$+\u00e9\u20ac\U0001f600"
# The ways a server may write one character of the path it repeats.
WRITINGS: list[Callable[[str], str]] = [
    lambda c: c,
    str.upper,
    str.lower,
    lambda c: f"%{ord(c):02X}",
    lambda c: f"%{ord(c):02x}",
    lambda c: f"\\u{ord(c):04x}",
    lambda c: f"\\x{ord(c):02x}",
    lambda c: f"&#{ord(c)};",
    lambda c: f"&#x{ord(c):X};",
    lambda c: "\\/" if c == "/" else c,
]
paths = st.text(PATH_CHARS, min_size=1, max_size=80)
around = st.text(AROUND, min_size=1, max_size=12)


@st.composite
def written(draw: st.DrawFn, piece: str) -> str:
    """``piece`` as a server might repeat it, each character written its own way."""
    return "".join(draw(st.sampled_from(WRITINGS))(char) for char in piece)


@st.composite
def piece_of(draw: st.DrawFn, path: str, shortest: int, longest: int) -> str:
    """A substring of ``path`` of ``shortest`` to ``longest`` characters."""
    length = draw(st.integers(shortest, min(longest, len(path))))
    start = draw(st.integers(0, len(path) - length))
    return path[start : start + length]


@st.composite
def texts_with_fragments(draw: st.DrawFn) -> tuple[str, str, str]:
    """A path, a text holding fragments of it (each written some way) between other words,
    and that text with each fragment replaced by ``***``."""
    path = draw(st.text(PATH_CHARS, min_size=SHORTEST_FRAGMENT, max_size=80))
    first = draw(st.text(AROUND, max_size=12))
    text, expected = [first], [first]
    for gap in draw(st.lists(around, min_size=1, max_size=4)):
        fragment = draw(piece_of(path, SHORTEST_FRAGMENT, len(path)))
        text += [draw(written(fragment)), gap]
        expected += ["***", gap]
    return path, "".join(text), "".join(expected)


@st.composite
def texts_without_fragments(draw: st.DrawFn) -> tuple[str, str]:
    """A path and a text that holds only pieces of it shorter than a fragment, apart."""
    path = draw(paths)
    text = [draw(st.text(AROUND, max_size=12))]
    for gap in draw(st.lists(around, max_size=5)):
        piece = draw(piece_of(path, 1, SHORTEST_FRAGMENT - 1))
        text += [draw(written(piece)), gap]
    return path, "".join(text)


@given(texts_with_fragments())
def test_no_fragment_of_a_path_survives_in_any_writing(
    case: tuple[str, str, str],
) -> None:
    """Every fragment (eight characters or more) of a random path, in a random case and
    escaping, becomes ***; the words around it are kept."""
    path, text, expected = case

    hidden = hide_fragments(text, path)

    assert hidden == expected
    pieces = {path.lower()[i : i + SHORTEST_FRAGMENT] for i in range(len(path) - 7)}
    assert not any(piece in hidden.lower() for piece in pieces)


@given(texts_without_fragments())
def test_a_text_without_a_fragment_of_the_path_is_unchanged(case: tuple[str, str]) -> None:
    """Pieces of the path shorter than a fragment, however written, leave the text as it was."""
    path, text = case

    assert hide_fragments(text, path) == text
