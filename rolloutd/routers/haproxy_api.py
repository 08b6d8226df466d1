"""HAProxy's runtime API (the ``stats socket``), spoken the way the management guide describes.

Non-interactive mode: connect, send one command line, half-close, read until HAProxy closes.
Several ``set weight`` commands go on one line separated by ``;`` so HAProxy applies them in
one pass, microseconds apart, rather than across several connections that a restart could
split. Every answer is parsed strictly: text that is not what HAProxy 2.x prints is reported
as garbage (a :class:`TemporaryError` naming the socket), never trusted and never a crash.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.routers import deadline

TIMEOUT = 2.0
MAX_ANSWER = 4 << 20
# srv_admin_state bits that take a server out of the hash ring (maintenance or drain, set
# by an operator, inherited, or from the configuration); 0x40 only records an FQDN change.
OUT_OF_SERVICE = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20
_STATE_COLUMNS = ("be_name", "srv_name", "srv_op_state", "srv_admin_state", "srv_uweight")
_PRINTABLE = {9, 10} | set(range(32, 127))


@dataclass(frozen=True)
class Address:
    """Where the runtime API listens: a UNIX socket path or a TCP host and port."""

    family: socket.AddressFamily
    target: str | tuple[str, int]
    label: str


def parse_address(text: str) -> Address:
    """Read ``/run/haproxy/admin.sock``, ``unix@PATH``, ``host:port`` or ``[v6]:port``.

    :raises ValueError: when ``text`` is none of those.
    """
    if text.startswith("unix@"):
        text = text.removeprefix("unix@")
    if text.startswith(("/", ".")):
        return Address(socket.AF_UNIX, text, text)
    for prefix in ("ipv4@", "ipv6@", "tcp@"):
        text = text.removeprefix(prefix)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected a socket path or host:port, got {text!r}")
    family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
    return Address(family, (host.strip("[]"), int(port)), text)


@dataclass(frozen=True)
class ServerState:
    """One line of ``show servers state``: the parts a split depends on."""

    backend: str
    name: str
    op_state: int
    admin_state: int
    weight: int

    @property
    def effective_weight(self) -> int:
        """The weight the hash ring uses: none while in maintenance or drain."""
        return 0 if self.admin_state & OUT_OF_SERVICE else self.weight


class RuntimeAPI:
    """A client of one HAProxy runtime API socket."""

    def __init__(self, address: str, *, timeout: float = TIMEOUT) -> None:
        try:
            self.address = parse_address(address)
        except ValueError as exc:
            raise PermanentError(f"HAProxy router socket: {exc}") from None
        self.label = self.address.label
        self.timeout = timeout

    def ask(self, command: str) -> str:
        """Send one command line and return HAProxy's whole answer as text.

        :raises TemporaryError: HAProxy is unreachable, slow, or answered something unreadable.
        :raises PermanentError: rolloutd may not open the socket.
        """
        raw = self._exchange(command.encode("ascii") + b"\n")
        if not raw:
            raise TemporaryError(f"HAProxy runtime API {self.label} closed without answering")
        if any(byte not in _PRINTABLE for byte in raw):
            raise TemporaryError(f"garbage from {self.label}: {_sample(raw)}")
        text = raw.decode("ascii")
        if not text.endswith("\n\n") and text != "\n":
            raise TemporaryError(f"garbage from {self.label}: answer cut short: {_sample(raw)}")
        return text

    def servers_state(self, backend: str | None = None) -> tuple[list[ServerState], str]:
        """``show servers state``: the parsed servers and the raw dump (for the state file).

        :raises PermanentError: the backend does not exist.
        :raises TemporaryError: as :meth:`ask`, or when the dump is not in the known format.
        """
        text = self.ask(f"show servers state {backend}" if backend else "show servers state")
        lines = _single_block(text, self.label)
        if lines == ["Can't find backend."]:
            raise PermanentError(f"HAProxy at {self.label} has no backend {backend!r}")
        if len(lines) < 2 or not lines[0].isdigit() or not lines[1].startswith("# "):
            raise TemporaryError(f"garbage from {self.label}: not a server-state dump: {lines[:2]}")
        columns = lines[1][2:].split()
        missing = [c for c in _STATE_COLUMNS if c not in columns]
        if missing:
            raise TemporaryError(f"garbage from {self.label}: dump lacks columns {missing}")
        servers = [self._server(line, columns) for line in lines[2:] if not line.startswith("#")]
        if backend is not None and any(s.backend != backend for s in servers):
            raise TemporaryError(f"garbage from {self.label}: dump names other backends")
        return servers, text

    def _server(self, line: str, columns: list[str]) -> ServerState:
        fields = line.split(" ")
        if len(fields) == len(columns):
            value = dict(zip(columns, fields, strict=True))
            try:
                server = ServerState(
                    backend=value["be_name"],
                    name=value["srv_name"],
                    op_state=int(value["srv_op_state"]),
                    admin_state=int(value["srv_admin_state"]),
                    weight=int(value["srv_uweight"]),
                )
            except ValueError:
                pass
            else:
                if 0 <= server.weight <= 256:
                    return server
        raise TemporaryError(f"garbage from {self.label}: bad server line {line!r}")

    def algorithm(self, backend: str) -> str:
        """The load-balancing algorithm the running HAProxy uses for ``backend`` (``show stat``).

        :raises PermanentError: the backend does not exist.
        :raises TemporaryError: as :meth:`ask`.
        """
        lines = _single_block(self.ask(f"show stat {backend} 2 -1"), self.label)
        if not lines or not lines[0].startswith("# pxname,"):
            raise TemporaryError(f"garbage from {self.label}: not a stats dump: {lines[:1]}")
        header = lines[0][2:].split(",")
        if "algo" not in header:
            raise TemporaryError(f"garbage from {self.label}: stats dump has no 'algo' column")
        rows = [line.split(",") for line in lines[1:] if line.startswith(f"{backend},BACKEND,")]
        if not rows:
            raise PermanentError(f"HAProxy at {self.label} has no backend {backend!r}")
        if len(rows[0]) < len(header) - 1:
            raise TemporaryError(f"garbage from {self.label}: short stats line for {backend}")
        return rows[0][header.index("algo")]

    def set_weights(self, backend: str, weights: Sequence[tuple[str, int]]) -> list[str]:
        """Apply ``set weight`` for each (server, weight) in one pass; return HAProxy's refusals.

        An empty list means every command succeeded; otherwise one message per failed
        command, in order, as ``server: message``.

        :raises TemporaryError: unreachable, or an answer that does not fit the commands sent
            (then it is unknown which weights were applied).
        :raises PermanentError: as :meth:`ask`.
        """
        if not weights:
            return []
        line = "; ".join(f"set weight {backend}/{server} {weight}" for server, weight in weights)
        blocks = _blocks(self.ask(line), self.label)
        if len(blocks) != len(weights):
            raise TemporaryError(
                f"garbage from {self.label}: {len(blocks)} answers to {len(weights)} commands"
            )
        refusals = []
        for (server, _), block in zip(weights, blocks, strict=True):
            if block:
                refusals.append(f"{server}: {' '.join(block)}")
        return refusals

    def _exchange(self, request: bytes) -> bytes:
        try:
            with socket.socket(self.address.family, socket.SOCK_STREAM) as conn:
                # Inside a router write, no exchange may outlast the write's deadline.
                timeout = deadline.remaining(self.timeout)
                deadline.check(f"HAProxy runtime API {self.label}")
                conn.settimeout(timeout)
                conn.connect(self.address.target)
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
                return self._read_all(conn)
        except FileNotFoundError:
            raise TemporaryError(
                f"HAProxy runtime API socket {self.label} does not exist "
                "(is HAProxy running with `stats socket ... level admin`?)"
            ) from None
        except PermissionError:
            # Only a deployment change (socket mode, group membership) fixes this.
            raise PermanentError(
                f"permission denied on HAProxy runtime API socket {self.label}: give "
                "rolloutd's user access, e.g. `stats socket PATH mode 660 group haproxy "
                "level admin` and add the user to that group"
            ) from None
        except ConnectionRefusedError:
            raise TemporaryError(
                f"HAProxy runtime API {self.label} refused the connection "
                "(HAProxy stopped or restarting)"
            ) from None
        except TimeoutError:
            raise TemporaryError(
                f"HAProxy runtime API {self.label} did not answer within {self.timeout:g}s"
            ) from None
        except OSError as exc:
            raise TemporaryError(
                f"HAProxy runtime API {self.label}: {exc.strerror or exc}"
            ) from None

    def _read_all(self, conn: socket.socket) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while chunk := conn.recv(65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER:
                raise TemporaryError(
                    f"garbage from {self.label}: answer longer than {MAX_ANSWER} bytes"
                )
        return b"".join(chunks)


def _blocks(text: str, label: str) -> list[list[str]]:
    """Split an answer into one block per command: each ends with an empty line."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.split("\n")[:-1]:
        if line:
            current.append(line)
        else:
            blocks.append(current)
            current = []
    if current:
        raise TemporaryError(f"garbage from {label}: answer cut short")
    return blocks


def _single_block(text: str, label: str) -> list[str]:
    blocks = _blocks(text, label)
    if len(blocks) != 1:
        raise TemporaryError(f"garbage from {label}: {len(blocks)} answers to one command")
    return blocks[0]


def _sample(raw: bytes) -> str:
    return repr(raw[:80]) + ("..." if len(raw) > 80 else "")
