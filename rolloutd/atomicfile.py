"""Replacing a file so that no reader ever sees half of it.

Load balancers read the files the drivers write (an NGINX include, HAProxy's server-state
file, the LiteLLM plugin's weights), and systemd the environment file a rollback writes, at
moments the writer does not choose: a reload started by someone else, a restart, a crash. Write
to a temporary file beside the target, flush it to disk, rename it over the target, and sync
the directory, so the target is always either the old document or the new one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_file(
    path: Path,
    data: bytes,
    *,
    mode: int = 0o644,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Atomically make ``path`` hold exactly ``data``.

    ``before_replace`` runs after the new file is on disk, right before the rename; what it
    raises leaves ``path`` unchanged (a router write checks its deadline there).

    :raises OSError: when the directory cannot be written; ``path`` is then unchanged.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
