"""The running NGINX as Linux shows it: the master named by the pid file, and its workers.

NGINX offers no API to read back the configuration it loaded. What can be observed is that
its master is alive, and when its workers started: a reload replaces them, so workers younger
than the include file prove a reload happened after the file was written.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from rolloutd.errors import TemporaryError

_PROC = Path("/proc")


def running_master(pid_file: Path) -> int:
    """The pid of the live NGINX master that ``pid_file`` names.

    :raises TemporaryError: no pid file, garbage in it, or no live NGINX master behind it.
    """
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        raise TemporaryError(f"nginx is not running: pid file {pid_file} does not exist") from None
    except OSError as exc:
        raise TemporaryError(f"cannot read nginx pid file {pid_file}: {exc.strerror}") from None
    if not text.isdigit() or int(text) < 1:
        raise TemporaryError(f"garbage in nginx pid file {pid_file}: {text[:40]!r}")
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise TemporaryError(f"nginx master {pid} (from {pid_file}) is not running") from None
    except PermissionError:
        pass  # alive, owned by another user (root, usually)
    status = _stat(pid)
    if status is not None and status[0] == "Z":
        raise TemporaryError(f"nginx master {pid} (from {pid_file}) has exited")
    try:
        command = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return pid  # no /proc to ask: trust the signal check
    if not command.startswith(b"nginx: master process"):
        raise TemporaryError(f"process {pid} (from {pid_file}) is not an nginx master")
    return pid


@dataclass(frozen=True)
class Child:
    """A process the master started: a worker (or a cache helper), when, and its title."""

    pid: int
    started: float
    title: str

    @property
    def accepting(self) -> bool:
        """Whether it may still take new connections (a worker not yet told to shut down)."""
        return self.title.startswith("nginx: worker process") and "shutting down" not in self.title


def children(pid: int) -> dict[int, Child]:
    """The master's child processes, by pid."""
    listing = _PROC / str(pid) / "task" / str(pid) / "children"
    try:
        pids = [int(p) for p in listing.read_text().split()]
    except OSError:
        pids = [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]
    boot = time.time() - float((_PROC / "uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for child in pids:
        status = _stat(child)
        if status is None or int(status[1]) != pid or status[0] == "Z":
            continue
        try:
            # A worker told to stop retitles itself just before it closes its listeners.
            title = (_PROC / str(child) / "cmdline").read_bytes().rstrip(b"\0").decode()
        except (OSError, UnicodeDecodeError):
            title = ""
        found[child] = Child(child, boot + int(status[19]) / ticks, title)
    return found


def _stat(pid: int) -> list[str] | None:
    """Fields 3 onwards of /proc/PID/stat (state, ppid, ...), or None if it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()
