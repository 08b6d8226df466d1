"""The NGINX driver: render the split, test it, reload, and read back what nginx runs.

NGINX open source has no runtime weight API, so a change is a file (``nginx_conf``) written
atomically, tested with ``nginx -T`` (which also dumps the whole configuration, so the driver
can see that its include and variables are really wired in), and loaded with
``nginx -s reload``. When the test fails the previous include is put back byte for byte (with
its old modification time) and the error says why. A reload counts once the master has
started new workers, and, when ``verify_url`` is set, once that location answers the new
state: the only evidence of what the workers really loaded.

Read-back parses the live include, checks the master is alive, and that its workers started
after the include was written (else the file is not what nginx runs). Without ``verify_url``
that is as far as NGINX lets anyone look: it has no API to read the loaded configuration.
The master and its workers are found through the pid file and ``/proc``, so rolloutd must
run on the NGINX host, in the same PID namespace.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from pathlib import Path
from urllib.parse import urlsplit

from rolloutd.atomicfile import replace_file
from rolloutd.errors import PermanentError, RolloutdError, TemporaryError
from rolloutd.routers import deadline
from rolloutd.routers.base import RouterState, check_weight
from rolloutd.routers.nginx_conf import Names, Split, parse, parse_state, render
from rolloutd.routers.nginx_process import children, running_master

COMMAND_TIMEOUT = 10.0
RELOAD_TIMEOUT = 10.0
# Worker start times come from clock ticks (10 ms); allow for that when comparing to mtime.
CLOCK_SLACK = 0.05


class NginxRouter:
    """Splits sessions between two NGINX upstreams through a rendered include."""

    def __init__(
        self,
        include_path: str | Path,
        *,
        stable_upstream: str,
        canary_upstream: str,
        config_path: str | Path = "/etc/nginx/nginx.conf",
        pid_file: str | Path = "/run/nginx.pid",
        nginx_binary: str = "nginx",
        prefix: str | None = None,
        variable: str = "rolloutd_pool",
        session_header: str = "X-Session-Id",
        verify_url: str | None = None,
        command_prefix: Sequence[str] = (),
        reload_timeout: float = RELOAD_TIMEOUT,
    ) -> None:
        self.include_path = Path(include_path)
        self.names = Names(variable, session_header, stable_upstream, canary_upstream)
        self.config_path = Path(config_path)
        self.pid_file = Path(pid_file)
        self.verify_url = verify_url
        self.reload_timeout = reload_timeout
        # Until the reload signal is sent: ``nginx -T`` and the signal share it.
        self.write_timeout = timedelta(seconds=COMMAND_TIMEOUT)
        self._command = [*command_prefix, nginx_binary, "-e", "stderr", "-c", str(config_path)]
        self._command += ["-p", prefix] if prefix else []
        self._lock = threading.Lock()

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        """Write, test and load the include; put the old one back if nginx refuses it.

        :raises PermanentError: ``nginx -t`` failed or the include is not wired in (the old
            include is back: nothing changed), or the include cannot be written.
        :raises TemporaryError: nginx is down, or the reload did not show within the timeout.
        """
        split = Split(check_weight(weight), mirror)
        with self._lock:
            previous = _Snapshot.of(self.include_path)
            self._write(render(self.names, split).encode(), previous.mode)
            try:
                self._wire_check(self._dump(), mirror=mirror)
                master = running_master(self.pid_file)
                before = set(children(master))
                # Past the deadline another leader may have written: put ours back instead.
                deadline.check(f"reloading nginx for {self.include_path}")
                self._run("-s", "reload")
            except RolloutdError as exc:
                raise self._put_back(previous, exc) from exc
            self._await_reload(master, before, split)

    def read_weight(self) -> RouterState:
        """What the running nginx splits by, from its include (and ``verify_url`` if set).

        :raises TemporaryError: nginx down, the include unreadable or unparsable, or changed
            since nginx last loaded its configuration.
        """
        master = running_master(self.pid_file)
        split, written = self._read_include()
        workers = children(master)
        if workers and max(c.started for c in workers.values()) < written - CLOCK_SLACK:
            raise TemporaryError(
                f"{self.include_path} changed after nginx (master {master}) last loaded its "
                "configuration: what it says is not what nginx runs until a reload"
            )
        if self.verify_url:
            # What the workers answer is the truth, whatever the file says.
            split = self._probe()
        return RouterState(split.weight, split.mirror)

    def check(self) -> None:
        """Refuse to start unless nginx tests clean and really routes by the include.

        :raises PermanentError: with the directive to add or the error nginx printed.
        :raises TemporaryError: nginx is not running or ``verify_url`` does not answer.
        """
        if not os.access(self.include_path.parent, os.W_OK):
            raise PermanentError(f"cannot write nginx include in {self.include_path.parent}")
        files = self._dump()
        self._wire_check(files, mirror=False)
        for pool, name in (("stable", self.names.stable), ("canary", self.names.canary)):
            if not any(
                re.search(rf"^\s*upstream\s+{re.escape(name)}\s*\{{", t, re.M)
                for t in files.values()
            ):
                raise PermanentError(
                    f"no `upstream {name} {{ ... }}` block in {self.config_path}: define the "
                    f"{pool} pool's upstream, or fix router.upstreams.{pool}"
                )
        try:
            self._read_include()
        except TemporaryError as exc:
            raise PermanentError(str(exc)) from None
        running_master(self.pid_file)
        if self.verify_url:
            self._probe()

    # -- running nginx ----------------------------------------------------------------------

    def _run(self, *args: str) -> str:
        command = [*self._command, *args]
        timeout = deadline.remaining(COMMAND_TIMEOUT)
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError:
            raise PermanentError(f"cannot run {command[0]}: not found") from None
        except subprocess.TimeoutExpired:
            raise TemporaryError(f"`{' '.join(command)}` took longer than {timeout:g}s") from None
        if done.returncode != 0:
            errors = " / ".join(
                line
                for line in done.stderr.splitlines()
                if "[emerg]" in line or "[error]" in line or "[alert]" in line
            )
            message = errors or done.stderr.strip()[-500:]
            if args[:1] == ("-T",):
                # The configuration is wrong: retrying the same file will not help.
                raise PermanentError(f"nginx -t failed for {self.config_path}: {message}")
            raise TemporaryError(f"`nginx {' '.join(args)}` failed: {message}")
        return done.stdout

    def _dump(self) -> dict[str, str]:
        """``nginx -T``: test the configuration and return every file of it, path → text."""
        files: dict[str, list[str]] = {}
        current: list[str] = []
        for line in self._run("-T").splitlines():
            match = re.fullmatch(r"# configuration file (.+):", line)
            if match:
                current = files.setdefault(os.path.realpath(match[1]), [])
            else:
                current.append(line.split("#", 1)[0])
        return {path: "\n".join(lines) for path, lines in files.items()}

    def _wire_check(self, files: dict[str, str], *, mirror: bool) -> None:
        include = os.path.realpath(self.include_path)
        if include not in files:
            raise PermanentError(
                f"{self.config_path} does not include {self.include_path}: add "
                f"`include {self.include_path};` to its http block"
            )
        others = [text for path, text in files.items() if path != include]
        wanted = [self.names.variable] + ([f"{self.names.variable}_mirror"] if mirror else [])
        for variable in wanted:
            if not any(re.search(rf"\$\{{?{variable}\b", text) for text in others):
                what = (
                    "proxy_pass http://$"
                    if variable == self.names.variable
                    else "mirror location testing $"
                )
                raise PermanentError(
                    f"nothing in {self.config_path} uses ${variable}: add a {what}{variable} "
                    "(see config/nginx/rolloutd-site.conf)"
                )

    def _await_reload(self, master: int, before: set[int], split: Split) -> None:
        """Wait until the master runs new workers (and ``verify_url`` answers ``split``)."""
        deadline = time.monotonic() + self.reload_timeout
        while time.monotonic() < deadline:
            now = children(master)
            started = set(now) - before
            # Old workers finish their requests, but must no longer accept new connections.
            lingering = [c for pid, c in now.items() if pid in before and c.accepting]
            if started and not lingering and (not self.verify_url or self._live_is(split)):
                return
            time.sleep(0.005)
        raise TemporaryError(
            f"nginx master {master} did not load {self.include_path} within "
            f"{self.reload_timeout:g}s of the reload: see nginx's error log"
        )

    def _live_is(self, split: Split) -> bool:
        try:
            return self._probe() == split
        except TemporaryError:
            return False

    def _probe(self) -> Split:
        """Ask ``verify_url`` on a new connection (so a new worker answers, not an old one)."""
        assert self.verify_url is not None
        url = urlsplit(self.verify_url)
        kind = HTTPSConnection if url.scheme == "https" else HTTPConnection
        conn = kind(url.netloc, timeout=2.0)
        try:
            conn.request("GET", url.path or "/", headers={"Connection": "close"})
            answer = conn.getresponse()
            body = answer.read(200).decode(errors="replace")
            if answer.status != 200:
                raise ValueError(f"HTTP {answer.status}")
            return parse_state(body)
        except (OSError, HTTPException, ValueError) as exc:
            raise TemporaryError(f"nginx verify_url {self.verify_url}: {exc}") from None
        finally:
            conn.close()

    # -- the include ------------------------------------------------------------------------

    def _read_include(self) -> tuple[Split, float]:
        """The include's split and when it was written (one open file: the two agree)."""
        try:
            with self.include_path.open("rb") as handle:
                written = os.fstat(handle.fileno()).st_mtime
                text = handle.read().decode(errors="replace")
        except OSError as exc:
            raise TemporaryError(
                f"cannot read nginx include {self.include_path}: {exc.strerror}"
            ) from None
        try:
            return parse(text, self.names), written
        except ValueError as exc:
            raise TemporaryError(f"cannot parse nginx include {self.include_path}: {exc}") from None

    def _put_back(self, previous: _Snapshot, exc: RolloutdError) -> RolloutdError:
        """Restore the include after a refused change; the error to raise says so."""
        try:
            previous.restore(self.include_path)
        except OSError as restore_exc:
            return TemporaryError(
                f"{exc}; putting back the previous {self.include_path} failed: "
                f"{restore_exc.strerror}: it now holds a change nginx did not load"
            )
        note = f"the previous {self.include_path} was put back, nothing changed"
        if isinstance(exc, TemporaryError):
            return TemporaryError(f"{exc}; {note}", delay=exc.delay)
        return PermanentError(f"{exc}; {note}")

    def _write(self, data: bytes, mode: int) -> None:
        try:
            replace_file(self.include_path, data, mode=mode)
        except PermissionError:
            raise PermanentError(
                f"cannot write nginx include {self.include_path}: permission denied"
            ) from None
        except OSError as exc:
            raise TemporaryError(
                f"cannot write nginx include {self.include_path}: {exc.strerror}"
            ) from None


class _Snapshot:
    """A file's bytes, mode and times (or its absence), to put back exactly as it was."""

    def __init__(self, data: bytes | None, stat: os.stat_result | None) -> None:
        self.data = data
        self.stat = stat

    @property
    def mode(self) -> int:
        """The permission bits to give the next version of the file."""
        return self.stat.st_mode & 0o7777 if self.stat else 0o644

    @classmethod
    def of(cls, path: Path) -> _Snapshot:
        try:
            return cls(path.read_bytes(), path.stat())
        except FileNotFoundError:
            return cls(None, None)
        except OSError as exc:
            raise TemporaryError(f"cannot read nginx include {path}: {exc.strerror}") from None

    def restore(self, path: Path) -> None:
        # The old mtime matters: read-back compares it with when nginx's workers started.
        if self.data is None or self.stat is None:
            path.unlink(missing_ok=True)
            return
        replace_file(path, self.data, mode=self.mode)
        os.utime(path, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))
