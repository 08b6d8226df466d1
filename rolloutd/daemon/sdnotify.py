"""The systemd notify protocol: one datagram to ``$NOTIFY_SOCKET``, nothing more.

Implemented directly rather than through a library because it is a single ``sendto``.
Without ``$NOTIFY_SOCKET`` (not under systemd) every call does nothing.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends READY=1, STATUS=..., WATCHDOG=1 and STOPPING=1 to systemd."""

    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        # A leading '@' names a socket in the abstract namespace.
        self._address = "\0" + address[1:] if address and address.startswith("@") else address

    @property
    def enabled(self) -> bool:
        """Whether systemd is listening."""
        return bool(self._address)

    def send(self, *fields: str) -> bool:
        """Send ``fields`` (``KEY=value``) as one datagram; False when it could not be sent."""
        if not self._address:
            return False
        # A newline inside a field would smuggle in another field (STATUS="x\nSTOPPING=1").
        message = "\n".join(f.replace("\n", " ") for f in fields).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                # Never block the main loop on a full queue: a lost keep-alive beats a hang.
                sock.sendto(message, socket.MSG_DONTWAIT, self._address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        """Tell systemd that start-up finished."""
        return self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> bool:
        """Update the one-line status ``systemctl status`` shows."""
        return self.send(f"STATUS={status}")

    def watchdog(self) -> bool:
        """Tell systemd the main loop is alive."""
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        """Tell systemd that shutdown began."""
        return self.send("STOPPING=1", "STATUS=stopping")


def watchdog_interval() -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, when systemd expects keep-alives from us."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        microseconds = int(usec)
    except ValueError:
        return None
    return microseconds / 2_000_000 if microseconds > 0 else None
