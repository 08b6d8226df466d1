"""The plugin's decisions without a proxy: the weights files as read, and each request's pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rolloutd.routers.litellm_pools import SessionPools, WeightsDirectory, session_of
from rolloutd.routers.litellm_split import BUCKETS, GroupWeights, bucket, pool_for

GROUP = "atlas-70b"
STABLE = {"model_name": GROUP, "litellm_params": {"model": "s"}, "model_info": {"id": "s"}}
CANARY = {
    "model_name": GROUP,
    "litellm_params": {"model": "c"},
    "model_info": {"id": "c", "rolloutd_pool": "canary"},
}


def _request(session: str | None, **metadata: Any) -> dict[str, Any]:
    headers = {"x-session-id": session} if session else {}
    return {"metadata": {"headers": headers, **metadata}}


def _pools(tmp_path: Path, weight: int | None, *, mirror: bool = False) -> SessionPools:
    if weight is not None:
        (tmp_path / f"{GROUP}.json").write_text(GroupWeights(GROUP, weight, mirror).to_json())
    return SessionPools(WeightsDirectory(tmp_path))


def _ids(chosen: list[dict[str, Any]]) -> list[str]:
    return [d["model_info"]["id"] for d in chosen]


def test_a_group_without_a_weights_file_sends_nothing_to_its_canary(tmp_path: Path) -> None:
    """No file yet: every session is on stable."""
    pools = _pools(tmp_path, None)
    assert {
        tuple(_ids(pools.pick(GROUP, [STABLE, CANARY], _request(str(i))))) for i in range(200)
    } == {("s",)}


def test_the_split_is_exact_at_0_and_100_even_when_a_pool_is_empty(tmp_path: Path) -> None:
    """At 0% a request never reaches the canary, even with stable in cooldown (nothing left)."""
    assert _pools(tmp_path, 0).pick(GROUP, [CANARY], _request("a")) == []
    assert _pools(tmp_path, 100).pick(GROUP, [STABLE], _request("a")) == []


def test_between_the_ends_a_pool_with_nothing_healthy_hands_over_its_sessions(
    tmp_path: Path,
) -> None:
    """At 50%, a canary session whose canary is in cooldown is served by stable."""
    pools = _pools(tmp_path, 50)
    session = next(s for s in map(str, range(100)) if pool_for(50, GROUP, s) == "canary")
    assert _ids(pools.pick(GROUP, [STABLE], _request(session))) == ["s"]


def test_mirroring_marks_stable_for_litellms_silent_copy_and_the_copy_goes_to_the_canary(
    tmp_path: Path,
) -> None:
    """While mirroring, the stable deployment carries ``silent_model: <group>`` (a copy, the
    router's own dict untouched), and the silent request is narrowed to the canary."""
    pools = _pools(tmp_path, 0, mirror=True)
    chosen = pools.pick(GROUP, [STABLE, CANARY], _request("a"))
    assert chosen[0]["litellm_params"]["silent_model"] == GROUP
    assert "silent_model" not in STABLE["litellm_params"]
    silent = pools.pick(GROUP, [STABLE, CANARY], _request("a", is_silent_experiment=True))
    assert _ids(silent) == ["c"]


def test_a_garbage_file_keeps_the_last_weights_and_is_reported(tmp_path: Path) -> None:
    """A file edited into garbage does not move the group; the problem names the field."""
    directory = WeightsDirectory(tmp_path)
    path = tmp_path / f"{GROUP}.json"
    path.write_text(GroupWeights(GROUP, 25).to_json())
    assert directory.current().groups()[GROUP][0].canary_weight == 25
    path.write_text('{"model_group": "atlas-70b", "canary_weight": "lots"}')
    loaded = directory.current()
    assert loaded.groups()[GROUP][0].canary_weight == 25
    assert "canary_weight" in loaded.problems[str(path)]


def test_two_files_for_one_group_apply_the_first_and_report_the_second(tmp_path: Path) -> None:
    """The group is set by one file only; the other is named as a problem."""
    (tmp_path / "a.json").write_text(GroupWeights(GROUP, 5).to_json())
    (tmp_path / "b.json").write_text(GroupWeights(GROUP, 50).to_json())
    loaded = WeightsDirectory(tmp_path).current()
    assert loaded.groups()[GROUP][0].canary_weight == 5
    assert "already set" in loaded.problems[str(tmp_path / "b.json")]


def test_a_vanished_directory_keeps_the_weights_in_force(tmp_path: Path) -> None:
    """The plugin keeps what it read when its directory cannot be listed, and says so."""
    directory = WeightsDirectory(tmp_path / "w")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "g.json").write_text(GroupWeights(GROUP, 5).to_json())
    directory.current()
    (tmp_path / "w" / "g.json").unlink()
    (tmp_path / "w").rmdir()
    loaded = directory.current()
    assert loaded.groups()[GROUP][0].canary_weight == 5
    assert "cannot list" in loaded.problems[str(tmp_path / "w")]


@pytest.mark.parametrize("header", ["X-Session-Id", "x-session-id", "X-SESSION-ID"])
def test_the_session_header_is_found_in_any_case(header: str) -> None:
    """Header names are case-insensitive, as HTTP says."""
    assert session_of({"metadata": {"headers": {"x-Session-id": "abc"}}}, header) == "abc"
    assert session_of({"metadata": {}}, header) is None


def test_raising_the_weight_only_adds_sessions_to_the_canary() -> None:
    """For every session, canary at w1 implies canary at any w2 > w1 (the bucket rule)."""
    sessions = [f"s{i}" for i in range(3000)]
    for low, high in [(1, 5), (5, 25), (25, 50), (50, 99)]:
        at_low = {s for s in sessions if pool_for(low, GROUP, s) == "canary"}
        at_high = {s for s in sessions if pool_for(high, GROUP, s) == "canary"}
        assert at_low <= at_high
    assert all(0 <= bucket(GROUP, s) < BUCKETS for s in sessions)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[]", "not a JSON object"),
        ('{"canary_weight": 5}', "model_group"),
        ('{"model_group": "g", "canary_weight": 101}', "canary_weight"),
        ('{"model_group": "g", "canary_weight": 5, "mirror": "yes"}', "mirror"),
        ("{", "not JSON"),
    ],
)
def test_a_bad_weights_document_names_its_field(text: str, named: str) -> None:
    """Parsing refuses a document with the field that is wrong."""
    with pytest.raises(ValueError, match=named):
        GroupWeights.from_json(text)
