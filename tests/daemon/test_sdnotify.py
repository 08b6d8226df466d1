"""rolloutd.daemon.sdnotify: datagrams as systemd receives them, on a real AF_UNIX socket."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rolloutd.daemon.sdnotify import Notifier, watchdog_interval

# A datagram larger than any message the Notifier sends.
MAX_DATAGRAM = 4096


def _receive(listener: socket.socket) -> bytes:
    """The one datagram waiting on ``listener``; fails if a second one follows."""
    datagram = listener.recv(MAX_DATAGRAM)
    listener.setblocking(False)
    try:
        extra = listener.recv(MAX_DATAGRAM)
    except BlockingIOError:
        return datagram
    finally:
        listener.settimeout(2)
    pytest.fail(f"a second datagram arrived: {extra!r}")


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    """Where the fake systemd listens (short enough for sun_path's 108 bytes)."""
    path = tmp_path / "notify"
    assert len(os.fsencode(path)) < 108
    return path


@pytest.fixture
def listener(socket_path: Path) -> Iterator[socket.socket]:
    """A datagram socket bound at ``socket_path``, standing in for systemd's notify socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(socket_path))
        sock.settimeout(2)
        yield sock


@pytest.fixture
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the notify socket nor the watchdog variables are set."""
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda n: n.ready("leading 3 rollouts"), b"READY=1\nSTATUS=leading 3 rollouts"),
        (lambda n: n.status("standby"), b"STATUS=standby"),
        (lambda n: n.watchdog(), b"WATCHDOG=1"),
        (lambda n: n.stopping(), b"STOPPING=1\nSTATUS=stopping"),
        (lambda n: n.send("RELOADING=1", "STATUS=x"), b"RELOADING=1\nSTATUS=x"),
    ],
    ids=["ready", "status", "watchdog", "stopping", "send"],
)
def test_each_message_arrives_as_exactly_one_datagram(
    listener: socket.socket,
    socket_path: Path,
    call: Callable[[Notifier], bool],
    expected: bytes,
) -> None:
    """Each call sends one datagram holding its fields, newline-separated, and returns True."""
    notifier = Notifier(str(socket_path))
    assert call(notifier) is True
    assert _receive(listener) == expected


def test_status_is_sent_as_utf8(listener: socket.socket, socket_path: Path) -> None:
    """A status with non-ASCII text (a model name, say) arrives UTF-8 encoded."""
    assert Notifier(str(socket_path)).status("canary → 5 %")
    assert _receive(listener) == "STATUS=canary → 5 %".encode()


def test_notify_socket_is_read_from_the_environment(
    listener: socket.socket, socket_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an explicit address the Notifier uses ``$NOTIFY_SOCKET``, as systemd sets it."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(socket_path))
    notifier = Notifier()
    assert notifier.enabled
    assert notifier.watchdog()
    assert _receive(listener) == b"WATCHDOG=1"


@pytest.mark.parametrize("from_environment", [False, True], ids=["argument", "environment"])
def test_leading_at_sign_names_an_abstract_socket(
    from_environment: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``@name`` reaches the abstract-namespace socket ``\\0name``, which has no file."""
    name = f"rolloutd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as abstract:
        abstract.bind("\0" + name)
        abstract.settimeout(2)
        if from_environment:
            monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
            notifier = Notifier()
        else:
            notifier = Notifier("@" + name)
        assert notifier.ready("up")
        assert _receive(abstract) == b"READY=1\nSTATUS=up"


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
@pytest.mark.usefixtures("no_environment")
def test_without_notify_socket_every_call_is_a_no_op(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not under systemd, every call returns False without even creating a socket."""
    if value is not None:
        monkeypatch.setenv("NOTIFY_SOCKET", value)

    def no_socket(*args: object, **kwargs: object) -> socket.socket:
        raise AssertionError("a socket was created")

    monkeypatch.setattr(socket, "socket", no_socket)
    notifier = Notifier()
    assert not notifier.enabled
    assert notifier.ready("up") is False
    assert notifier.status("x") is False
    assert notifier.watchdog() is False
    assert notifier.stopping() is False
    assert notifier.send("WATCHDOG=1") is False


def test_missing_socket_file_returns_false(tmp_path: Path) -> None:
    """A path where nothing listens makes every call return False instead of raising."""
    notifier = Notifier(str(tmp_path / "nobody-here"))
    assert notifier.enabled
    assert notifier.ready("up") is False
    assert notifier.watchdog() is False


def test_closed_socket_returns_false(socket_path: Path) -> None:
    """A socket file whose listener is gone (connection refused) returns False."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(socket_path))
    assert socket_path.exists()
    assert Notifier(str(socket_path)).watchdog() is False


def test_unbound_abstract_name_returns_false() -> None:
    """An abstract name nobody has bound returns False."""
    assert Notifier(f"@rolloutd-test-{uuid.uuid4().hex}").watchdog() is False


def test_address_longer_than_sun_path_returns_false() -> None:
    """An address too long for a sockaddr_un is an OSError inside, False outside."""
    assert Notifier("/" + "x" * 200).watchdog() is False


@pytest.mark.usefixtures("no_environment")
def test_watchdog_interval_is_half_of_watchdog_usec(monkeypatch: pytest.MonkeyPatch) -> None:
    """WatchdogSec=30s (WATCHDOG_USEC=30000000) means a keep-alive every 15 seconds."""
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert watchdog_interval() == 15.0


@pytest.mark.parametrize(("pid_offset", "interval"), [(0, 15.0), (1, None)], ids=["ours", "other"])
@pytest.mark.usefixtures("no_environment")
def test_watchdog_interval_applies_only_when_watchdog_pid_is_ours(
    pid_offset: int, interval: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WATCHDOG_PID naming this process keeps the interval; variables inherited from a parent
    that systemd watches (another process's pid) are not meant for us."""
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + pid_offset))
    assert watchdog_interval() == interval


@pytest.mark.usefixtures("no_environment")
def test_watchdog_interval_is_none_without_watchdog_usec() -> None:
    """No WATCHDOG_USEC means systemd expects no keep-alives."""
    assert watchdog_interval() is None


@pytest.mark.parametrize("value", ["", "abc", "30s", "1.5e6"])
@pytest.mark.usefixtures("no_environment")
def test_watchdog_interval_is_none_for_garbage(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A WATCHDOG_USEC that is not a whole number of microseconds is ignored."""
    monkeypatch.setenv("WATCHDOG_USEC", value)
    assert watchdog_interval() is None


@pytest.mark.parametrize("value", ["0", "-30000000"])
@pytest.mark.usefixtures("no_environment")
def test_watchdog_interval_is_none_for_non_positive_usec(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zero or negative WATCHDOG_USEC is not a usable interval (a loop would spin or raise)."""
    monkeypatch.setenv("WATCHDOG_USEC", value)
    assert watchdog_interval() is None


def test_status_newline_cannot_inject_fields(listener: socket.socket, socket_path: Path) -> None:
    """A multi-line status stays one STATUS field; it cannot smuggle in another message."""
    assert Notifier(str(socket_path)).status("rollout x\nSTOPPING=1")
    fields = _receive(listener).split(b"\n")
    assert fields == [fields[0]]
    assert fields[0].startswith(b"STATUS=")


def test_backed_up_notify_socket_does_not_block(listener: socket.socket, socket_path: Path) -> None:
    """When systemd does not read its socket, calls give up at once instead of blocking."""
    notifier = Notifier(str(socket_path))
    results: list[bool] = []
    sender = threading.Thread(
        target=lambda: results.extend(notifier.watchdog() for _ in range(50)), daemon=True
    )
    sender.start()
    sender.join(timeout=1)
    blocked = sender.is_alive()
    # Closing the listener wakes a blocked sender, so the thread never outlives the test.
    listener.close()
    sender.join(timeout=1)
    assert not blocked
    assert results[0] is True
    assert results[-1] is False
