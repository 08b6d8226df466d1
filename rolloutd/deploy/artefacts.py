"""Hashing a directory of engine artefacts, and comparing one against a pinned set.

Model files are tens of gigabytes, so each file is read in 1 MiB chunks (memory stays flat)
and files are hashed in parallel threads (``hashlib`` releases the GIL on large updates, so
two files hash on two cores). Paths are stored relative to the root, in POSIX form, sorted.
A symlink to a file is hashed as its target (model caches link snapshots to blobs); a
symlinked directory is followed once, and a link that loops or dangles is bad input.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rolloutd.errors import BadInput

CHUNK = 1024 * 1024
Engine = Literal["trtllm", "vllm"]
ENGINES: tuple[Engine, ...] = ("trtllm", "vllm")
Progress = Callable[[int], None]
"""Called with the number of bytes just hashed (from worker threads)."""


@dataclass(frozen=True)
class FileDigest:
    """One file of a set: its path relative to the root, its size and sha256."""

    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON form stored in ``artefact_sets.files``."""
        return {"path": self.path, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileDigest:
        """Read the stored JSON form."""
        return cls(path=str(data["path"]), size=int(data["size"]), sha256=str(data["sha256"]))


@dataclass(frozen=True)
class PinnedSet:
    """An immutable artefact set: engine kind, engine config, files with digests.

    ``digest`` covers the engine, the config and every file's path, size and sha256, not the
    name or the root: two names for the same content have the same digest, and a drill keyed
    by digests holds for both.
    """

    name: str
    engine: Engine
    engine_config: dict[str, Any]
    files: tuple[FileDigest, ...]
    root: str
    digest: str
    created_by: str = ""

    @property
    def total_bytes(self) -> int:
        """The size of all files together."""
        return sum(f.size for f in self.files)

    def manifest(self) -> dict[str, Any]:
        """The set as JSON: what a deploy command receives as its manifest file."""
        return {
            "name": self.name,
            "engine": self.engine,
            "engine_config": self.engine_config,
            "root": self.root,
            "digest": self.digest,
            "files": [f.as_dict() for f in self.files],
        }


@dataclass(frozen=True)
class Mismatch:
    """One way a directory differs from a pinned set."""

    path: str
    problem: Literal["missing", "changed", "unexpected", "unreadable"]
    expected: str | None = None
    found: str | None = None

    def __str__(self) -> str:
        if self.problem == "changed":
            return f"{self.path}: sha256 {_short(self.found)}, pinned {_short(self.expected)}"
        if self.problem == "missing":
            return f"{self.path}: missing (pinned {_short(self.expected)})"
        if self.problem == "unexpected":
            return f"{self.path}: not in the pinned set"
        return f"{self.path}: cannot be read ({self.found})"


@dataclass
class _Walk:
    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    seen_dirs: set[tuple[int, int]] = field(default_factory=set)


def set_digest(engine: str, engine_config: Mapping[str, Any], files: Iterable[FileDigest]) -> str:
    """The sha256 of the canonical JSON of engine, config and files (sorted by path)."""
    canonical = json.dumps(
        {
            "engine": engine,
            "engine_config": engine_config,
            "files": [f.as_dict() for f in sorted(files, key=lambda f: f.path)],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def list_files(root: str | Path) -> dict[str, Path]:
    """Every regular file under ``root`` by its relative POSIX path, following symlinks.

    :raises BadInput: the root is not a readable directory, holds no files, or has a
        dangling or looping symlink.
    """
    base = Path(root)
    source = str(root)
    if not base.exists():
        raise BadInput.one(source, "", "no such directory")
    if not base.is_dir():
        raise BadInput.one(source, "", "is not a directory; expected the artefact directory")
    walk = _Walk(base)
    _walk(walk, base, "")
    if not walk.files:
        raise BadInput.one(source, "", "holds no files; an artefact set needs at least one")
    return dict(sorted(walk.files.items()))


def _walk(walk: _Walk, directory: Path, prefix: str) -> None:
    try:
        info = directory.stat()
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except PermissionError:
        raise BadInput.one(str(directory), "", "permission denied") from None
    key = (info.st_dev, info.st_ino)
    if key in walk.seen_dirs:
        raise BadInput.one(str(directory), "", "a symlink loops back to a directory already read")
    walk.seen_dirs.add(key)
    for entry in entries:
        relative = f"{prefix}{entry.name}"
        path = Path(entry.path)
        try:
            mode = path.stat().st_mode  # follows symlinks
        except FileNotFoundError:
            raise BadInput.one(str(path), "", "is a dangling symlink") from None
        except OSError as exc:
            raise BadInput.one(str(path), "", f"cannot be read: {exc.strerror}") from None
        if stat.S_ISDIR(mode):
            _walk(walk, path, f"{relative}/")
        elif stat.S_ISREG(mode):
            walk.files[relative] = path
        else:
            raise BadInput.one(str(path), "", "is not a regular file or directory")


def hash_file(path: Path, progress: Progress | None = None) -> str:
    """The sha256 of ``path``, read in 1 MiB chunks.

    :raises OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as handle:
        buffer = bytearray(CHUNK)
        view = memoryview(buffer)
        while read := handle.readinto(buffer):
            digest.update(view[:read])
            if progress is not None:
                progress(read)
    return digest.hexdigest()


def hash_files(
    files: Mapping[str, Path], *, workers: int | None = None, progress: Progress | None = None
) -> list[FileDigest]:
    """Hash every file (relative path -> path) in parallel; sorted by path.

    :raises OSError: a file cannot be read.
    """
    count = workers or min(8, os.cpu_count() or 1)

    def one(item: tuple[str, Path]) -> FileDigest:
        relative, path = item
        return FileDigest(relative, path.stat().st_size, hash_file(path, progress))

    if count <= 1:
        return [one(item) for item in files.items()]
    # Largest first, so one huge file does not start last and leave the other threads idle.
    ordered = sorted(files.items(), key=lambda item: item[1].stat().st_size, reverse=True)
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="hash") as pool:
        digests = list(pool.map(one, ordered))
    return sorted(digests, key=lambda d: d.path)


def hash_directory(
    root: str | Path, *, workers: int | None = None, progress: Progress | None = None
) -> list[FileDigest]:
    """List and hash every file under ``root``.

    :raises BadInput: see :func:`list_files`, or a file that cannot be read.
    """
    files = list_files(root)
    try:
        return hash_files(files, workers=workers, progress=progress)
    except OSError as exc:
        raise BadInput.one(
            str(exc.filename or root), "", f"cannot be read: {exc.strerror}"
        ) from None


def compare(pinned: Iterable[FileDigest], found: Iterable[FileDigest]) -> list[Mismatch]:
    """How the files ``found`` differ from the ``pinned`` ones (missing, changed, unexpected)."""
    want = {f.path: f for f in pinned}
    have = {f.path: f for f in found}
    mismatches = [
        Mismatch(path, "missing", expected=f.sha256) for path, f in want.items() if path not in have
    ]
    mismatches += [
        Mismatch(path, "changed", expected=f.sha256, found=have[path].sha256)
        for path, f in want.items()
        if path in have and have[path].sha256 != f.sha256
    ]
    mismatches += [Mismatch(path, "unexpected") for path in have if path not in want]
    return sorted(mismatches, key=lambda m: m.path)


def verify_directory(
    pinned: PinnedSet,
    root: str | Path,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
) -> list[Mismatch]:
    """Hash the files under ``root`` and compare them with ``pinned``; [] means identical.

    Never raises for a missing or unreadable directory: that is a mismatch too.
    """
    try:
        files = list_files(root)
    except BadInput as exc:
        return [Mismatch(str(root), "unreadable", found=exc.problems[0].message)]
    try:
        found = hash_files(files, workers=workers, progress=progress)
    except OSError as exc:
        return [Mismatch(str(exc.filename or root), "unreadable", found=exc.strerror)]
    return compare(pinned.files, found)


def _short(digest: str | None) -> str:
    return (digest or "?")[:12]
