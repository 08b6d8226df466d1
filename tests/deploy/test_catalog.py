"""Pinned sets in the database, and the artefact checks a rollout start makes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from rolloutd.deploy.catalog import check_artefacts, find_set, get_set, list_sets, pin
from rolloutd.errors import NotFound, Refused

from .helpers import CANARY_CONFIG, STABLE_CONFIG, pinned, plan_for

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_a_pinned_set_reads_back_as_it_was_pinned(session: Session, tmp_path: Path) -> None:
    """Name, engine, config, files, root and digest survive the database."""
    stable = pinned(tmp_path, "build-old", STABLE_CONFIG)
    assert pin(session, stable, now=NOW) is True
    assert get_set(session, "build-old") == stable
    assert [(s.name, at) for s, at in list_sets(session)] == [("build-old", NOW)]


def test_pinning_the_same_content_again_is_a_no_op(session: Session, tmp_path: Path) -> None:
    """Same name, same digest: nothing new is stored."""
    stable = pinned(tmp_path, "build-old", STABLE_CONFIG)
    pin(session, stable, now=NOW)
    assert pin(session, stable, now=NOW) is False
    assert len(list_sets(session)) == 1


def test_a_pinned_name_cannot_be_given_other_content(session: Session, tmp_path: Path) -> None:
    """Sets are immutable: other content under the same name is refused, the old one kept."""
    stable = pinned(tmp_path, "build-old", STABLE_CONFIG)
    pin(session, stable, now=NOW)
    changed = pinned(tmp_path / "again", "build-old", {**STABLE_CONFIG, "max_seq_len": 16384})
    with pytest.raises(Refused, match=r"pinned already with digest .*immutable"):
        pin(session, changed, now=NOW)
    assert get_set(session, "build-old").digest == stable.digest


def test_an_unknown_set_is_not_found_with_the_command_that_pins_it(session: Session) -> None:
    """The message tells the operator how to pin it."""
    assert find_set(session, "nope") is None
    with pytest.raises(NotFound, match="rolloutctl artefact pin nope DIR"):
        get_set(session, "nope")


def test_check_artefacts_reports_sets_that_are_not_pinned(session: Session, tmp_path: Path) -> None:
    """Each missing set is named with the plan field that names it."""
    pin(session, pinned(tmp_path, "build-old", STABLE_CONFIG), now=NOW)
    plan = plan_for({"kind": "none"}, ["http://127.0.0.1:9"])
    [problem] = check_artefacts(session, plan)
    assert problem.startswith("artefacts.canary: artefact set 'build-new' is not pinned")


def test_check_artefacts_refuses_files_that_no_longer_match(
    session: Session, tmp_path: Path
) -> None:
    """A file changed after pinning is reported; an unreadable root is left to the replica."""
    pin(session, pinned(tmp_path, "build-old", STABLE_CONFIG), now=NOW)
    pin(session, pinned(tmp_path, "build-new", CANARY_CONFIG), now=NOW)
    plan = plan_for({"kind": "none"}, ["http://127.0.0.1:9"])
    assert check_artefacts(session, plan) == []
    (tmp_path / "build-new" / "rank0.engine").write_bytes(b"rebuilt")
    [problem] = check_artefacts(session, plan)
    assert problem.startswith("artefacts.canary: 'build-new' no longer matches its digests: ")
    assert "rank0.engine: sha256" in problem
    assert check_artefacts(session, plan, verify_files=False) == []
    (tmp_path / "build-new").rename(tmp_path / "elsewhere")
    assert check_artefacts(session, plan) == []
