"""Hashing a directory, the set digest, and comparing a directory with a pinned set."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rolloutd.deploy.artefacts import (
    FileDigest,
    hash_directory,
    list_files,
    set_digest,
    verify_directory,
)
from rolloutd.deploy.catalog import build_set, read_engine_config
from rolloutd.errors import BadInput

from .helpers import STABLE_CONFIG, make_tree, model_tree


def test_hashes_match_hashlib_and_paths_are_relative_and_sorted(tmp_path: Path) -> None:
    """Each file's sha256 and size are those of its bytes; paths are relative POSIX."""
    big = os.urandom(3 * 1024 * 1024 + 17)  # crosses the 1 MiB chunk boundary
    make_tree(tmp_path, {"b/weights.bin": big, "a.json": b"{}"})
    digests = hash_directory(tmp_path, workers=4)
    assert digests == [
        FileDigest("a.json", 2, hashlib.sha256(b"{}").hexdigest()),
        FileDigest("b/weights.bin", len(big), hashlib.sha256(big).hexdigest()),
    ]


def test_serial_and_parallel_hashing_agree_and_report_progress(tmp_path: Path) -> None:
    """Worker count does not change the result; progress adds up to the total size."""
    make_tree(tmp_path, {f"shard-{i}.bin": os.urandom(300_000 + i) for i in range(6)})
    seen: list[int] = []
    parallel = hash_directory(tmp_path, workers=3, progress=seen.append)
    assert hash_directory(tmp_path, workers=1) == parallel
    assert sum(seen) == sum(f.size for f in parallel)


def test_set_digest_depends_on_config_and_content_not_on_order(tmp_path: Path) -> None:
    """Reordered files give the same digest; a config or byte change gives another."""
    files = hash_directory(model_tree(tmp_path, "x"))
    same = set_digest("trtllm", STABLE_CONFIG, list(reversed(files)))
    assert same == set_digest("trtllm", STABLE_CONFIG, files)
    assert set_digest("trtllm", {**STABLE_CONFIG, "max_seq_len": 8192}, files) != same
    assert set_digest("vllm", STABLE_CONFIG, files) != same
    (tmp_path / "rank0.engine").write_bytes(b"other")
    assert set_digest("trtllm", STABLE_CONFIG, hash_directory(tmp_path)) != same


def test_a_symlinked_file_is_hashed_as_its_target(tmp_path: Path) -> None:
    """Model caches link snapshots to blobs: the link's path with the blob's digest."""
    make_tree(tmp_path / "blobs", {"abc": b"weights"})
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "model.safetensors").symlink_to(tmp_path / "blobs" / "abc")
    assert hash_directory(snapshot) == [
        FileDigest("model.safetensors", 7, hashlib.sha256(b"weights").hexdigest())
    ]


def test_dangling_and_looping_symlinks_are_bad_input(tmp_path: Path) -> None:
    """A link to nothing, or back to a parent, names the path at fault."""
    make_tree(tmp_path / "d", {"x": b"1"})
    (tmp_path / "d" / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(BadInput, match="gone: is a dangling symlink"):
        list_files(tmp_path / "d")
    (tmp_path / "d" / "gone").unlink()
    (tmp_path / "d" / "loop").symlink_to(tmp_path / "d")
    with pytest.raises(BadInput, match="loop: a symlink loops"):
        list_files(tmp_path / "d")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p.mkdir(), "holds no files"),
        (lambda p: None, "no such directory"),
        (lambda p: p.write_text("x"), "is not a directory"),
    ],
)
def test_a_directory_that_cannot_be_pinned_is_bad_input(
    tmp_path: Path, setup: object, message: str
) -> None:
    """An empty directory, a missing one, or a file: the message names the path."""
    target = tmp_path / "models"
    setup(target)  # type: ignore[operator]
    with pytest.raises(BadInput) as caught:
        build_set("atlas", target, "trtllm", STABLE_CONFIG)
    assert str(caught.value).startswith(f"{target}: {message}")


def test_verify_reports_changed_missing_and_unexpected_files(tmp_path: Path) -> None:
    """Every difference is one mismatch; an identical directory gives none."""
    pinned = build_set("atlas", model_tree(tmp_path / "a", "a"), "trtllm", STABLE_CONFIG)
    assert verify_directory(pinned, tmp_path / "a") == []
    (tmp_path / "a" / "rank0.engine").write_bytes(b"tampered")
    (tmp_path / "a" / "config.json").unlink()
    (tmp_path / "a" / "extra.bin").write_bytes(b"?")
    found = {(m.path, m.problem) for m in verify_directory(pinned, tmp_path / "a")}
    assert found == {
        ("rank0.engine", "changed"),
        ("config.json", "missing"),
        ("extra.bin", "unexpected"),
    }


def test_verify_of_a_missing_directory_is_a_mismatch_not_an_error(tmp_path: Path) -> None:
    """A replica path that vanished is reported, never raised."""
    pinned = build_set("atlas", model_tree(tmp_path / "a", "a"), "trtllm", STABLE_CONFIG)
    [mismatch] = verify_directory(pinned, tmp_path / "nope")
    assert mismatch.problem == "unreadable" and "no such directory" in str(mismatch)


def test_engine_config_is_read_from_yaml_or_json(tmp_path: Path) -> None:
    """Both formats give the same mapping."""
    (tmp_path / "c.yaml").write_text("max_seq_len: 8192\nkv_cache_dtype: fp8\n")
    (tmp_path / "c.json").write_text('{"max_seq_len": 8192, "kv_cache_dtype": "fp8"}')
    assert read_engine_config(tmp_path / "c.yaml") == read_engine_config(tmp_path / "c.json")


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("max_seq_len: -5\n", "max_seq_len", "expected a positive integer"),
        ("max_seq_len: '8192'\n", "max_seq_len", "expected a positive integer"),
        ("gpu_memory_utilization: 1.5\n", "gpu_memory_utilization", "(0, 1]"),
        ("kv_cache_dtype: fp4\n", "kv_cache_dtype", "expected one of"),
        ("nested: {a: 1}\n", "nested", "expected a string, number or boolean, got dict"),
        ("- 1\n", "", "expected a non-empty mapping"),
        ("a: [\n", "", "is not valid YAML"),
        ("max_seq_len: 2025-13-45\n", "", "holds a value that cannot be read"),
        ("[" * 100_000, "", "is nested too deeply to read"),
    ],
)
def test_a_bad_engine_config_names_file_and_field(
    tmp_path: Path, text: str, field: str, message: str
) -> None:
    """Each bad parameter is reported as 'FILE: field: what was expected'."""
    path = tmp_path / "engine.yaml"
    path.write_text(text)
    with pytest.raises(BadInput) as caught:
        read_engine_config(path)
    problem = caught.value.problems[0]
    assert (problem.source, problem.field) == (str(path), field)
    assert message in problem.message
