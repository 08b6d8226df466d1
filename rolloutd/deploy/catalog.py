"""Pinned artefact sets in the database: pin, look up, list, and the checks before a start.

A set never changes once pinned: pinning the same name again with the same content is a
no-op, with other content it is refused. The engine config is a flat mapping of engine
parameters (``max_seq_len``, ``kv_cache_free_gpu_mem_fraction``, ...) in the engine's own
vocabulary, read from YAML or JSON; the well-known ones are type-checked here so that a
typo fails at pin time rather than at 3 a.m. during a rollback.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rolloutd.deploy.artefacts import (
    ENGINES,
    Engine,
    FileDigest,
    PinnedSet,
    Progress,
    hash_directory,
    set_digest,
    verify_directory,
)
from rolloutd.errors import BadInput, NotFound, Problem, Refused
from rolloutd.store import artefacts
from rolloutd.store.models import ArtefactSet
from rolloutd.store.writes import add_row
from rolloutd.userfiles import read_user_file, safe_yaml

if TYPE_CHECKING:
    from rolloutd.core.plan import Plan
    from rolloutd.store.types import Session

MAX_CONFIG_BYTES = 1024 * 1024
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"

_POSITIVE_INTS = ("max_seq_len", "max_model_len", "tensor_parallel_size", "tensor_parallel")
_FRACTIONS = ("kv_cache_free_gpu_mem_fraction", "gpu_memory_utilization", "memory_fraction")
_KV_DTYPES = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp32")


def read_engine_config(path: str | Path) -> dict[str, Any]:
    """Read and check an engine config file (YAML or JSON mapping of scalars).

    :raises BadInput: naming the file and the field at fault.
    """
    source = str(path)
    text = read_user_file(
        Path(path),
        expected="a YAML or JSON engine config",
        what="an engine config",
        limit=MAX_CONFIG_BYTES,
    )
    data = safe_yaml(text, source, what="YAML or JSON")
    if not isinstance(data, dict) or not data:
        raise BadInput.one(source, "", "expected a non-empty mapping of engine parameters")
    return check_engine_config(data, source)


def check_engine_config(data: dict[Any, Any], source: str) -> dict[str, Any]:
    """Check the parameters of an engine config; returns it with string keys.

    :raises BadInput: one problem per bad parameter.
    """
    problems = []
    for key, value in data.items():
        name = str(key)
        if not isinstance(key, str):
            problems.append(Problem(source, name, "parameter names must be strings"))
        elif not isinstance(value, str | int | float):
            kind = "null" if value is None else type(value).__name__
            problems.append(
                Problem(source, name, f"expected a string, number or boolean, got {kind}")
            )
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(source, name, "expected a finite number"))
        else:
            problems += [
                Problem(source, name, message) for message in _known_parameter(name, value)
            ]
    if problems:
        raise BadInput(problems)
    return {str(k): v for k, v in data.items()}


def _known_parameter(name: str, value: object) -> list[str]:
    if name in _POSITIVE_INTS and (
        isinstance(value, bool) or not isinstance(value, int) or value < 1
    ):
        return [f"expected a positive integer, got {value!r}"]
    if name in _FRACTIONS and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1
    ):
        return [f"expected a number in (0, 1], got {value!r}"]
    if name == "kv_cache_dtype" and value not in _KV_DTYPES:
        return [f"expected one of {', '.join(_KV_DTYPES)}, got {value!r}"]
    return []


def check_name(name: str, field: str = "NAME") -> str:
    """Refuse a set name that is not a plan ``Name`` (letters, digits, ``._-``, <= 100).

    :raises BadInput: naming ``field``.
    """
    if not re.fullmatch(NAME_PATTERN, name):
        raise BadInput.one(
            field, "", f"{name!r}: expected letters, digits, '.', '_' or '-' (at most 100)"
        )
    return name


def build_set(
    name: str,
    root: str | Path,
    engine: str,
    engine_config: dict[str, Any],
    *,
    created_by: str = "",
    workers: int | None = None,
    progress: Progress | None = None,
) -> PinnedSet:
    """Hash ``root`` and return the set it would pin (nothing is stored).

    :raises BadInput: a bad name, engine or directory.
    """
    check_name(name)
    if engine not in ENGINES:
        raise BadInput.one("--engine", "", f"expected one of {', '.join(ENGINES)}, got {engine!r}")
    files = tuple(hash_directory(root, workers=workers, progress=progress))
    return PinnedSet(
        name=name,
        engine=engine,
        engine_config=engine_config,
        files=files,
        root=str(Path(root).resolve()),
        digest=set_digest(engine, engine_config, files),
        created_by=created_by,
    )


def pin(session: Session, pinned: PinnedSet, *, now: datetime) -> bool:
    """Store ``pinned``; returns False when the same name holds the same digest already.

    :raises Refused: the name is pinned with other content (sets are immutable).
    """
    existing = artefacts.artefact_set_named(session, pinned.name)
    if existing is not None:
        if existing.digest == pinned.digest:
            return False
        raise Refused(
            f"artefact set {pinned.name!r} is pinned already with digest {existing.digest[:12]} "
            f"(this content is {pinned.digest[:12]}); sets are immutable: pin it under a new name"
        )
    add_row(
        session,
        ArtefactSet(
            name=pinned.name,
            engine=pinned.engine,
            engine_config=pinned.engine_config,
            files=[f.as_dict() for f in pinned.files],
            digest=pinned.digest,
            root=pinned.root,
            created_by=pinned.created_by,
            created_at=now,
        ),
    )
    return True


def find_set(session: Session, name: str) -> PinnedSet | None:
    """The pinned set called ``name``, or None."""
    row = artefacts.artefact_set_named(session, name)
    return None if row is None else _from_row(row)


def get_set(session: Session, name: str) -> PinnedSet:
    """The pinned set called ``name``.

    :raises NotFound: no such set, with the command that pins one.
    """
    found = find_set(session, name)
    if found is None:
        raise NotFound(
            f"no artefact set named {name!r}; pin one with: rolloutctl artefact pin {name} DIR "
            "--engine trtllm|vllm --engine-config FILE"
        )
    return found


def list_sets(session: Session) -> list[tuple[PinnedSet, datetime]]:
    """Every pinned set with the time it was pinned, newest first."""
    return [(_from_row(row), row.created_at) for row in artefacts.artefact_sets(session)]


def check_artefacts(session: Session, plan: Plan, *, verify_files: bool = True) -> list[str]:
    """What stops ``plan`` from starting on its artefacts: sets not pinned, and (when the
    set's root is readable from this host and ``verify_files``) files that no longer match
    their digests. An empty list means the sets are fit to start on.

    Hashing a 70B model's files takes minutes; to keep a transaction from staying open that
    long, look the sets up with ``verify_files=False`` and call :func:`file_problems`
    after the transaction.
    """
    problems, found = [], []
    for role in ("stable", "canary"):
        name = getattr(plan.artefacts, role)
        pinned = find_set(session, name)
        if pinned is None:
            problems.append(
                f"artefacts.{role}: artefact set {name!r} is not pinned "
                f"(rolloutctl artefact pin {name} DIR --engine ... --engine-config FILE)"
            )
        else:
            found.append((role, pinned))
    if verify_files:
        problems += file_problems(found)
    return problems


def file_problems(sets: Iterable[tuple[str, PinnedSet]]) -> list[str]:
    """For each (role, set) whose root this host can read, the files that no longer match."""
    problems = []
    for role, pinned in sets:
        # The root may live only on the GPU hosts; then the post-deploy check on the replica
        # is what verifies the files, and there is nothing to read here.
        if not os.access(pinned.root, os.R_OK | os.X_OK):
            continue
        problems += [
            f"artefacts.{role}: {pinned.name!r} no longer matches its digests: {m}"
            for m in verify_directory(pinned, pinned.root)
        ]
    return problems


def _from_row(row: ArtefactSet) -> PinnedSet:
    return PinnedSet(
        name=row.name,
        engine=cast(Engine, row.engine),
        engine_config=dict(row.engine_config),
        files=tuple(FileDigest.from_dict(f) for f in row.files),
        root=row.root,
        digest=row.digest,
        created_by=row.created_by,
    )
