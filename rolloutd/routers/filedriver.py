"""The ``file`` driver: desired weights as a JSON file, for load balancers fed by a templater.

consul-template, confd or a config-management run watch the file and render the load
balancer's configuration from it. The file is replaced atomically (write, fsync, rename)
so a watcher never reads half a document; every change is also appended to a journal
beside it (one JSON line per change), which is the audit trail of what was applied.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

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
        }
        data = json.dumps(document, indent=2) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
            with self.journal.open("a") as journal:
                journal.write(json.dumps(document) + "\n")
        except PermissionError as exc:
            raise PermanentError(
                f"cannot write router file {self.path}: permission denied"
            ) from exc
        except OSError as exc:
            raise TemporaryError(f"cannot write router file {self.path}: {exc.strerror}") from exc

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
