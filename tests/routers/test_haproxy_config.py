"""Reading an haproxy.cfg for what makes a split sticky: balance, hash-type, inheritance."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rolloutd.routers.haproxy_config import (
    loads_state_file,
    read_config,
    sticky_split_problems,
)
from tests.routers.services import find_binary

EXAMPLE = Path(__file__).parents[2] / "config" / "haproxy" / "atlas-70b.cfg"


def _problems(tmp_path: Path, text: str, backend: str = "llm") -> list[str]:
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    return sticky_split_problems(read_config(path), backend, "X-Session-Id")


def test_a_backend_with_both_lines_has_no_problem(tmp_path: Path) -> None:
    """`balance hdr(X-Session-Id)` with `hash-type consistent` is what the split needs."""
    text = "backend llm\n    balance hdr(X-Session-Id)\n    hash-type consistent\n"
    assert _problems(tmp_path, text) == []


def test_a_missing_hash_type_names_the_line_to_add(tmp_path: Path) -> None:
    """Without `hash-type` HAProxy uses a static map: the problem says to add `consistent`."""
    (problem,) = _problems(tmp_path, "backend llm\n    balance hdr(X-Session-Id)\n")
    assert "hash-type map-based" in problem and "add `hash-type consistent`" in problem


def test_a_backend_balancing_otherwise_names_the_balance_to_use(tmp_path: Path) -> None:
    """Round robin, or another header, is not a session split."""
    problems = _problems(tmp_path, "backend llm\n    hash-type consistent\n")
    assert problems == ["it balances with `balance roundrobin`: add `balance hdr(X-Session-Id)`"]
    other = "backend llm\n    balance hdr(X-User)\n    hash-type consistent\n"
    assert "balance hdr(X-User)" in _problems(tmp_path, other)[0]


@pytest.mark.parametrize(
    "balance", ["hdr(x-session-id)", "hash req.hdr(X-Session-Id)", "hash hdr(X-SESSION-ID)"]
)
def test_equivalent_spellings_of_the_header_hash_are_accepted(tmp_path: Path, balance: str) -> None:
    """Header names are case-insensitive, and `balance hash <sample>` hashes the same way."""
    text = f"backend llm\n    balance {balance}\n    hash-type consistent sdbm avalanche\n"
    assert _problems(tmp_path, text) == []


def test_settings_come_from_the_defaults_section_in_force(tmp_path: Path) -> None:
    """A backend inherits from the last defaults above it; a new defaults resets them."""
    text = (
        "defaults\n    balance hdr(X-Session-Id)\n    hash-type consistent\n"
        "backend llm\n    server a 127.0.0.1:1\n"
        "defaults\n    mode http\n"
        "backend later\n    server a 127.0.0.1:1\n"
    )
    assert _problems(tmp_path, text) == []
    assert len(_problems(tmp_path, text, backend="later")) == 2


def test_a_backend_can_name_the_defaults_it_takes(tmp_path: Path) -> None:
    """`backend NAME from DEFAULTS` takes that section's settings, not the last one's."""
    text = (
        "defaults sticky\n    balance hdr(X-Session-Id)\n    hash-type consistent\n"
        "defaults plain\n    mode http\n"
        "backend llm from sticky\n    server a 127.0.0.1:1\n"
    )
    assert _problems(tmp_path, text) == []


def test_comments_do_not_count(tmp_path: Path) -> None:
    """A commented-out `hash-type consistent` is no `hash-type consistent`."""
    text = "backend llm\n    balance hdr(X-Session-Id) # sticky\n    # hash-type consistent\n"
    assert len(_problems(tmp_path, text)) == 1


def test_a_balance_factor_is_refused_because_it_moves_sessions(tmp_path: Path) -> None:
    """`hash-balance-factor` sends busy servers' sessions elsewhere: across pools."""
    text = (
        "backend llm\n    balance hdr(X-Session-Id)\n    hash-type consistent\n"
        "    hash-balance-factor 150\n"
    )
    assert "hash-balance-factor 150" in _problems(tmp_path, text)[0]


def test_a_missing_backend_is_named(tmp_path: Path) -> None:
    """A plan naming a backend the file does not define gets that said."""
    assert _problems(tmp_path, "backend other\n") == [
        "there is no `backend llm` (or `listen llm`) section"
    ]


def test_a_directory_is_read_like_haproxy_reads_it(tmp_path: Path) -> None:
    """`-f DIR` loads DIR/*.cfg in name order; so does the reader."""
    (tmp_path / "10-defaults.cfg").write_text("defaults\n    hash-type consistent\n")
    (tmp_path / "20-llm.cfg").write_text("backend llm\n    balance hdr(X-Session-Id)\n")
    (tmp_path / "README").write_text("backend llm\n")
    assert sticky_split_problems(read_config(tmp_path), "llm", "X-Session-Id") == []


def test_the_state_file_is_resolved_against_its_base(tmp_path: Path) -> None:
    """A relative server-state-file is relative to server-state-base."""
    path = tmp_path / "haproxy.cfg"
    path.write_text(
        "global\n    server-state-base /var/lib/haproxy\n    server-state-file state\n"
        "defaults\n    load-server-state-from-file global\nbackend llm\n"
    )
    config = read_config(path)
    assert config.state_file() == Path("/var/lib/haproxy/state")
    assert loads_state_file(config, "llm")


def test_the_example_configuration_is_valid_and_sticky() -> None:
    """config/haproxy/atlas-70b.cfg passes `haproxy -c` and the driver's check of the plan's
    backend, and restores weights from the plan's state file."""
    done = subprocess.run(
        [find_binary("haproxy"), "-c", "-f", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config = read_config(EXAMPLE)
    assert sticky_split_problems(config, "atlas_70b", "X-Session-Id") == []
    assert config.state_file() == Path("/var/lib/haproxy/server-state")
    assert loads_state_file(config, "atlas_70b")
