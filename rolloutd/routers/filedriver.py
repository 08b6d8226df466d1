"""The ``file`` driver: desired weights as a JSON file, for load balancers fed by a templater.

consul-template, confd or a config-management run watch the file and render the load
balancer's configuration from it. The file is replaced atomically (write, fsync, rename)
so a watcher never reads half a document; every change is also appended to a journal
beside it (one JSON line per change), which is the audit trail of what was applied. The line
is appended after the rename (a line for a change that never landed would be worse than a
late one), so a process killed between the two leaves the journal a line short: the next
write first journals the file's document when the journal's last line is not it.

Every write, the journal's included, sits behind the write's deadline
(:mod:`rolloutd.routers.deadline`): a leader frozen past its lease appends nothing when it
wakes. Each document and journal line carries the lease epoch of the writer that applied it
(``epoch``; null outside the daemon), the journal is appended under an exclusive lock, and a
line older than the journal's last is refused, so the journal reads in epoch order.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rolloutd import failpoints
from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.routers import deadline
from rolloutd.routers.base import RouterState, check_weight


class FileRouter:
    """Writes ``{"canary_weight": W, "stable_weight": 100-W, "mirror": bool}`` to ``path``."""

    # A local rename lands at once; a disk that takes longer to fsync abandons the write.
    write_timeout = timedelta(seconds=1)

    def __init__(self, path: str | Path, *, session_header: str = "X-Session-Id") -> None:
        self.path = Path(path)
        self.journal = self.path.with_name(self.path.name + ".journal")
        self.session_header = session_header

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        document = {
            "canary_weight": check_weight(weight),
            "stable_weight": 100 - weight,
            "mirror": mirror,
            "session_header": self.session_header,
            "updated_at": datetime.now(UTC).isoformat(),
            "epoch": deadline.epoch(),
        }
        data = json.dumps(document, indent=2) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._journal_what_landed()
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                deadline.check(f"replacing router file {self.path}")
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            failpoints.hit("before_journal")
            if not self._journal(document):
                raise TemporaryError(
                    f"router journal {self.journal}: a newer leader wrote it; "
                    f"not recording {weight}% after its lines"
                )
        except PermissionError as exc:
            raise PermanentError(
                f"cannot write router file {self.path}: permission denied"
            ) from exc
        except OSError as exc:
            raise TemporaryError(f"cannot write router file {self.path}: {exc.strerror}") from exc

    def _journal(self, document: dict[str, Any]) -> bool:
        """Append ``document`` as what this writer applied, inside the write's deadline; False
        (nothing appended) when the journal's last line is of a newer epoch."""
        deadline.check(f"appending to router journal {self.journal}")
        with self.journal.open("a") as journal:
            fcntl.flock(journal.fileno(), fcntl.LOCK_EX)
            if _newer(_last_line(self.journal), document):
                return False
            journal.write(json.dumps(document) + "\n")
        return True

    def _journal_what_landed(self) -> None:
        """Journal the file's document if the journal does not end with it: the line of a
        change whose writer was killed after its rename, stamped with that writer's epoch,
        read now and appended inside this write's deadline (a stale read is never recorded:
        the deadline check comes after it, and the lock orders it against other writers)."""
        try:
            landed = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except ValueError:
            return  # not written by this driver; the write replaces it
        if isinstance(landed, dict) and landed != _last_line(self.journal):
            self._journal(landed)  # refused when a newer writer journaled since: history

    def read_weight(self) -> RouterState:
        try:
            document = json.loads(self.path.read_text())
        except FileNotFoundError:
            # Nothing written yet: no session has been sent to the canary by us.
            return RouterState(0, False)
        except (OSError, ValueError) as exc:
            raise TemporaryError(f"cannot read router file {self.path}: {exc}") from exc
        if not isinstance(document, dict):
            raise TemporaryError(f"router file {self.path} does not hold a JSON object")
        weight = document.get("canary_weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise TemporaryError(f"router file {self.path}: canary_weight {weight!r} is not 0-100")
        return RouterState(weight, bool(document.get("mirror", False)))

    def check(self) -> None:
        if not self.path.parent.exists():
            raise PermanentError(f"router file directory {self.path.parent} does not exist")
        if not os.access(self.path.parent, os.W_OK):
            raise PermanentError(f"router file directory {self.path.parent} is not writable")


JOURNAL_TAIL = 64 * 1024
"""How much of the journal's end is read for its last line (a line is a few hundred bytes)."""


def _newer(last: object, document: dict[str, Any]) -> bool:
    """Whether the journal's ``last`` line was written by a newer lease epoch than
    ``document``'s (lines without an epoch are not ordered)."""
    if not isinstance(last, dict):
        return False
    before, mine = last.get("epoch"), document.get("epoch")
    return isinstance(before, int) and isinstance(mine, int) and before > mine


def _last_line(journal: Path) -> object:
    """The document on the journal's last line, or None (no journal, or not a JSON line)."""
    try:
        with journal.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - JOURNAL_TAIL))
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
