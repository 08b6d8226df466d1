"""rolloutctl artefact pin/show/list/verify and drill: output contracts and bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from sqlalchemy import select

from rolloutd.sim.engine import Replica as SimReplica
from rolloutd.store.outbox_models import OutboxMessage
from tests.cli import Ctl

from .helpers import CANARY_CONFIG, STABLE_CONFIG, model_tree, plan_yaml

if TYPE_CHECKING:
    from conftest import StoreHandle


@pytest.fixture
def ctl(bare_ctl: Ctl) -> Ctl:
    """rolloutctl pointed at a fresh, migrated database."""
    return bare_ctl


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    """Engine directories and config files for build-old and build-new."""
    out = {}
    for name, config in (("build-old", STABLE_CONFIG), ("build-new", CANARY_CONFIG)):
        model_tree(tmp_path / name, name)
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        out[name] = tmp_path / name
    return out


def pin(ctl: Ctl, name: str, tree: Path) -> Any:
    """Pin ``tree`` as ``name`` with its config file; returns the JSON output."""
    config = tree.parent / f"{name}.yaml"
    return ctl.json(
        "artefact", "pin", name, str(tree), "--engine", "trtllm", "--engine-config", str(config)
    )


def test_pin_prints_the_set_and_show_and_list_read_it_back(
    ctl: Ctl, trees: dict[str, Path]
) -> None:
    """pin hashes and stores; show has every file; list has one row per set."""
    pinned = pin(ctl, "build-old", trees["build-old"])
    assert pinned["created"] is True
    assert (pinned["files"], pinned["engine"]) == (3, "trtllm")
    assert len(pinned["digest"]) == 64
    shown = ctl.json("artefact", "show", "build-old")
    assert shown["digest"] == pinned["digest"]
    assert shown["engine_config"] == STABLE_CONFIG
    assert [f["path"] for f in shown["files"]] == [
        "config.json",
        "rank0.engine",
        "tokenizer/tokenizer.json",
    ]
    assert [row["name"] for row in ctl.json("artefact", "list")] == ["build-old"]
    code, out, _ = ctl("artefact", "list")
    assert code == 0 and "build-old" in out and pinned["digest"][:12] in out


def test_pinning_again_is_idempotent_and_other_content_is_refused(
    ctl: Ctl, trees: dict[str, Path]
) -> None:
    """Same content: created False. Other content under the name: exit 3, set unchanged."""
    first = pin(ctl, "build-old", trees["build-old"])
    assert pin(ctl, "build-old", trees["build-old"])["created"] is False
    code, _, err = ctl(
        "artefact", "pin", "build-old", str(trees["build-new"]), "--engine", "trtllm",
        "--engine-config", str(trees["build-new"].parent / "build-new.yaml"),
    )  # fmt: skip
    assert code == 3 and "immutable" in err
    assert ctl.json("artefact", "show", "build-old")["digest"] == first["digest"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("empty-dir", "{dir}: holds no files"),
        ("bad-config", "{config}: max_seq_len: expected a positive integer, got 0"),
        ("bad-name", "NAME: 'no/slash'"),
    ],
)
def test_bad_input_names_the_file_and_field_and_stores_nothing(
    ctl: Ctl, tmp_path: Path, trees: dict[str, Path], change: str, expected: str
) -> None:
    """Exit 2, one clear line, and the database is unchanged."""
    directory, config, name = trees["build-old"], tmp_path / "build-old.yaml", "build-old"
    if change == "empty-dir":
        directory = tmp_path / "empty"
        directory.mkdir()
    elif change == "bad-config":
        config.write_text("max_seq_len: 0\n")
    else:
        name = "no/slash"
    code, _, err = ctl(
        "artefact",
        "pin",
        name,
        str(directory),
        "--engine",
        "trtllm",
        "--engine-config",
        str(config),
    )
    assert code == 2
    assert err.startswith("rolloutctl: " + expected.format(dir=directory, config=config))
    assert ctl.json("artefact", "list") == []


def test_verify_passes_then_names_each_changed_file_with_exit_1(
    ctl: Ctl, trees: dict[str, Path]
) -> None:
    """A tampered engine file is reported by path; --dir checks another copy."""
    pin(ctl, "build-old", trees["build-old"])
    assert ctl.json("artefact", "verify", "build-old")["ok"] is True
    (trees["build-old"] / "rank0.engine").write_bytes(b"tampered")
    code, out, _ = ctl("artefact", "verify", "build-old", "--output", "json")
    result = json.loads(out)
    assert code == 1 and result["ok"] is False
    assert [(m["path"], m["problem"]) for m in result["mismatches"]] == [
        ("rank0.engine", "changed")
    ]
    code, out, _ = ctl("artefact", "verify", "build-old")
    assert code == 1 and out.startswith("build-old: rank0.engine: sha256")


def test_show_of_an_unknown_set_is_exit_2(ctl: Ctl) -> None:
    """NotFound: a one-line message with the pin command."""
    code, _, err = ctl("artefact", "show", "nope")
    assert code == 2 and "rolloutctl artefact pin nope DIR" in err


@pytest.fixture
def sim() -> Iterator[SimReplica]:
    """One simulated Triton canary replica."""
    with SimReplica("c1", time_scale=1e-4) as started:
        yield started


TRITON = {
    "kind": "triton",
    "model": "atlas-70b",
    "versions": {"stable": 1, "canary": 3},
    "poll_interval": "10ms",
    "health_deadline": "2s",
}


def test_drill_runs_against_staging_and_records_its_result(
    ctl: Ctl, tmp_path: Path, trees: dict[str, Path], sim: SimReplica
) -> None:
    """Exit 0, JSON with eight passed steps, keyed by both digests."""
    stable = pin(ctl, "build-old", trees["build-old"])
    canary = pin(ctl, "build-new", trees["build-new"])
    plan = tmp_path / "staging.yaml"
    plan.write_text(plan_yaml(TRITON, [sim.url]))
    result = ctl.json("drill", str(plan), "--env", "staging")
    assert result["passed"] is True
    assert (result["stable"]["digest"], result["canary"]["digest"]) == (
        stable["digest"],
        canary["digest"],
    )
    assert [s["ok"] for s in result["steps"]] == [True] * 4
    assert sim.config.max_seq_len == 32768


def test_drill_refuses_changed_artefacts_and_a_wrong_environment(
    ctl: Ctl, tmp_path: Path, trees: dict[str, Path], sim: SimReplica
) -> None:
    """A digest mismatch refuses the drill before any deploy; production plans are bad input."""
    pin(ctl, "build-old", trees["build-old"])
    pin(ctl, "build-new", trees["build-new"])
    plan = tmp_path / "staging.yaml"
    plan.write_text(plan_yaml(TRITON, [sim.url], environment="production"))
    code, _, err = ctl("drill", str(plan), "--env", "staging")
    assert code == 2 and f"{plan}: environment: is 'production'" in err

    plan.write_text(plan_yaml(TRITON, [sim.url]))
    (trees["build-new"] / "config.json").write_text("{}")
    code, _, err = ctl("drill", str(plan), "--env", "staging")
    assert code == 3 and "'build-new' no longer matches its digests" in err
    assert sim.config.max_seq_len == 32768  # nothing was deployed


def test_drill_without_an_executor_is_bad_input(ctl: Ctl, tmp_path: Path) -> None:
    """A plan whose executor is 'none' has nothing to exercise."""
    plan = tmp_path / "staging.yaml"
    plan.write_text(plan_yaml({"kind": "none"}, ["http://127.0.0.1:9"]))
    code, _, err = ctl("drill", str(plan), "--env", "staging")
    assert code == 2 and "executor: a drill needs an executor" in err


def test_a_drill_result_is_queued_for_the_plans_alert_channels(
    ctl: Ctl, store: StoreHandle, tmp_path: Path, trees: dict[str, Path], sim: SimReplica
) -> None:
    """The plan routes drill_result to #ops: one outbox row naming the drill and the pair,
    sent by the leader's sender like any alert (the webhook stays in the environment)."""
    pin(ctl, "build-old", trees["build-old"])
    pin(ctl, "build-new", trees["build-new"])
    data = yaml.safe_load(plan_yaml(TRITON, [sim.url]))
    data["alerts"] = {"channels": {"ops": {"webhook_env": "SLACK_WEBHOOK_OPS"}}, "default": ["ops"]}
    plan = tmp_path / "staging.yaml"
    plan.write_text(yaml.safe_dump(data))
    drill = ctl.json("drill", str(plan), "--env", "staging")["drill"]
    with store.sessions.begin() as session:
        (row,) = session.scalars(select(OutboxMessage)).all()
        assert (row.topic, row.severity, row.channel) == ("drill_result", "info", "ops")
        assert row.webhook_env == "SLACK_WEBHOOK_OPS" and row.rollout_id is None
        assert f"Staging drill {drill}" in json.dumps(row.message)
        assert "build-old -> build-new" in json.dumps(row.message)
