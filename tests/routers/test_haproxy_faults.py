"""HAProxy driver faults: a missing or forbidden socket, garbage, restarts, refused changes.

Each fault must end in a clear error naming the socket (or file), with the weights HAProxy
applies unchanged (nothing half-applied), and a retry working once the fault is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.routers.base import RouterState
from rolloutd.routers.haproxy import HAProxyRouter
from rolloutd.routers.haproxy_api import RuntimeAPI
from tests.routers.conftest import start_haproxy
from tests.routers.services import BACKEND, STATIC_BACKEND, HAProxyService, Pools

Answer = Callable[[str], bytes | None]


class FakeRuntimeAPI:
    """A UNIX socket that answers each command with whatever ``answer`` returns.

    ``None`` means: say nothing and keep the connection open (a hung HAProxy).
    """

    def __init__(self, path: Path, answer: Answer) -> None:
        self.path = path
        self.answer = answer
        self.commands: list[str] = []
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                command = conn.makefile("rb").readline().decode().strip()
                self.commands.append(command)
                reply = self.answer(command)
                if reply is None:
                    self._stop.wait(1.0)
                    continue
                with contextlib.suppress(OSError):  # the client gave up reading: its right
                    conn.sendall(reply)

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.listener.close()


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Callable[[Answer], FakeRuntimeAPI]]:
    """Start fake runtime APIs on demand; all are closed after the test."""
    started: list[FakeRuntimeAPI] = []

    def start(answer: Answer) -> FakeRuntimeAPI:
        server = FakeRuntimeAPI(tmp_path / f"fake{len(started)}.sock", answer)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def own_haproxy(tmp_path: Path, pools: Pools) -> Iterator[HAProxyService]:
    """A haproxy of this test alone, free to be killed and restarted."""
    service = start_haproxy(tmp_path, pools)
    yield service
    service.stop()


def _weights(service: HAProxyService, backend: str = BACKEND) -> dict[str, int]:
    servers, _ = RuntimeAPI(str(service.socket)).servers_state(backend)
    return {server.name: server.weight for server in servers}


def test_a_missing_socket_is_a_temporary_error_naming_it(
    haproxy_service: HAProxyService, tmp_path: Path
) -> None:
    """No socket file (HAProxy down): every call is a TemporaryError that names the path."""
    router = haproxy_service.router(socket=str(tmp_path / "gone.sock"))
    for call in (router.read_weight, lambda: router.set_weight(5), router.check):
        with pytest.raises(TemporaryError, match=r"gone\.sock does not exist"):
            call()


_PERMISSION_PROBE = """
import json, sys
from rolloutd.routers.haproxy import HAProxyRouter
router = HAProxyRouter(sys.argv[1], backend="llm", stable=["gpu-a"], canary=["gpu-d"])
found = []
for call in (router.read_weight, lambda: router.set_weight(5)):
    try:
        call()
        found.append(["none", ""])
    except Exception as exc:
        found.append([type(exc).__name__, str(exc)])
print(json.dumps(found))
"""


def test_permission_denied_on_the_socket_is_a_permanent_error_naming_it(
    fake: Callable[[Answer], FakeRuntimeAPI],
) -> None:
    """A socket rolloutd may not open is a PermanentError naming it; nothing is sent."""
    server = fake(lambda command: b"\n")
    server.path.chmod(0o000)
    command = [sys.executable, "-c", _PERMISSION_PROBE, str(server.path)]
    if os.geteuid() == 0:
        # Root ignores file modes; drop every capability so the kernel checks them.
        command = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *command]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=os.getcwd())
    for kind, message in json.loads(done.stdout):
        assert kind == "PermanentError"
        assert f"permission denied on HAProxy runtime API socket {server.path}" in message
    assert server.commands == []


GARBAGE: dict[str, bytes | None] = {
    "binary": b"\x00\x17\xfe\xff garbage",
    "http": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    "wrong columns": b"1\n# be_id be_name srv_id\n3 llm 1\n\n",
    "bad weight": (
        b"1\n# be_name srv_name srv_op_state srv_admin_state srv_uweight\nllm gpu-a 2 0 x\n\n"
    ),
    "cut short": b"1\n# be_name srv_name",
    "nothing": b"",
    "silence": None,
    "flood": b"y" * (5 << 20),
}


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_on_the_socket_is_a_temporary_error_and_no_weight_is_sent(
    fake: Callable[[Answer], FakeRuntimeAPI], garbage: str
) -> None:
    """Whatever nonsense answers, read and set raise TemporaryError naming the socket, and
    no `set weight` goes out on the strength of it."""
    server = fake(lambda command: GARBAGE[garbage])
    router = HAProxyRouter(
        str(server.path), backend=BACKEND, stable=["gpu-a"], canary=["gpu-d"], timeout=0.3
    )
    for call in (router.read_weight, lambda: router.set_weight(5)):
        with pytest.raises(TemporaryError, match=str(server.path)):
            call()
    assert not [c for c in server.commands if c.startswith("set weight")]


def test_garbage_after_a_weight_change_is_a_temporary_error(
    fake: Callable[[Answer], FakeRuntimeAPI], haproxy_service: HAProxyService
) -> None:
    """An unreadable answer to `set weight` is a TemporaryError: the read-back will tell."""
    real = RuntimeAPI(str(haproxy_service.socket))

    def answer(command: str) -> bytes:
        return b"ok!\n" if command.startswith("set weight") else real.ask(command).encode()

    router = haproxy_service.router(socket=str(fake(answer).path))
    with pytest.raises(TemporaryError, match=r"answer cut short|answers to"):
        router.set_weight(25)


@pytest.mark.parametrize("moment", ["before the weights", "before the state is saved"])
def test_haproxy_killed_mid_shift_keeps_the_recorded_weights_and_the_retry_applies(
    own_haproxy: HAProxyService, moment: str
) -> None:
    """HAProxy dying during a change: TemporaryError naming the socket; restarted from its
    state file it still runs the recorded 5% (whatever the dead process had applied); the
    retry reaches 25%."""
    router = own_haproxy.router()
    router.set_weight(5)
    set_weights = router.api.set_weights

    def crash(backend: str, weights: Sequence[tuple[str, int]]) -> list[str]:
        if moment == "before the weights":
            own_haproxy.stop()
            return set_weights(backend, weights)
        refused = set_weights(backend, weights)
        own_haproxy.stop()
        return refused

    router.api.set_weights = crash  # type: ignore[method-assign]
    with pytest.raises(TemporaryError, match=f"{own_haproxy.socket} refused the connection"):
        router.set_weight(25)
    router.api.set_weights = set_weights  # type: ignore[method-assign]
    own_haproxy.start()
    assert router.read_weight() == RouterState(5, False)
    router.set_weight(25)
    assert router.read_weight() == RouterState(25, False)


def test_weights_survive_a_restart_through_the_state_file(own_haproxy: HAProxyService) -> None:
    """After a change the state file is saved, so a restarted HAProxy keeps the weights."""
    router = own_haproxy.router()
    router.set_weight(25)
    own_haproxy.stop()
    own_haproxy.start()
    assert router.read_weight() == RouterState(25, False)


def test_without_a_state_file_a_restart_reads_back_the_configured_weights(
    own_haproxy: HAProxyService,
) -> None:
    """Read-back reports what the restarted HAProxy does (0%), not what was last set."""
    router = own_haproxy.router(state_file=None)
    router.set_weight(25)
    own_haproxy.state_file.unlink(missing_ok=True)
    own_haproxy.stop()
    own_haproxy.start()
    assert router.read_weight() == RouterState(0, False)


def test_a_change_cut_short_does_not_read_back_as_any_step(
    haproxy_service: HAProxyService,
) -> None:
    """Weights half-way between two splits give no whole percent: read-back refuses them."""
    router = haproxy_service.router()
    router.set_weight(24)
    canary_only = [(name, w) for name, w in router.weights_for(25).items() if "gpu-d" in name]
    assert not router.api.set_weights(BACKEND, canary_only)
    with pytest.raises(TemporaryError, match="not a whole percent"):
        router.read_weight()
    router.set_weight(25)
    assert router.read_weight() == RouterState(25, False)


def test_a_static_hash_backend_is_refused_and_nothing_is_half_applied(
    haproxy_service: HAProxyService,
) -> None:
    """Without `hash-type consistent` check() names the backend and the fix; a change that
    HAProxy refuses half-way is put back."""
    router = haproxy_service.router(backend=STATIC_BACKEND, stable=["gpu-a"], canary=["gpu-d"])
    with pytest.raises(PermanentError, match=f"{STATIC_BACKEND}.*add `hash-type consistent`"):
        router.check()
    before = _weights(haproxy_service, STATIC_BACKEND)
    with pytest.raises(PermanentError, match=r"static LB algorithm.*put back"):
        router.set_weight(0)  # gpu-d may go to 0, gpu-a may not go to 200
    assert _weights(haproxy_service, STATIC_BACKEND) == before


def test_an_operator_level_socket_is_refused_before_any_change(
    haproxy_service: HAProxyService,
) -> None:
    """A socket below `level admin` fails check() with the fix, and changes nothing."""
    router = haproxy_service.router(socket=str(haproxy_service.operator_socket))
    before = _weights(haproxy_service)
    with pytest.raises(PermanentError, match="level admin"):
        router.check()
    with pytest.raises(PermanentError, match="Permission denied"):
        router.set_weight(50)
    assert _weights(haproxy_service) == before


def test_a_server_missing_from_the_backend_is_refused_before_any_change(
    haproxy_service: HAProxyService,
) -> None:
    """A plan naming a server HAProxy does not have changes nothing and names the server."""
    router = haproxy_service.router(canary=["gpu-d", "gpu-z"])
    before = _weights(haproxy_service)
    for call in (router.check, lambda: router.set_weight(5)):
        with pytest.raises(PermanentError, match="has no server gpu-z"):
            call()
    assert _weights(haproxy_service) == before


def test_check_refuses_to_guess_the_hash_type_without_the_config(
    haproxy_service: HAProxyService,
) -> None:
    """Without router.config_path check() refuses: the runtime API hides the hash type."""
    with pytest.raises(PermanentError, match="config_path is not set"):
        haproxy_service.router(config_path=None).check()


def test_check_refuses_a_state_file_haproxy_does_not_load(
    haproxy_service: HAProxyService, tmp_path: Path
) -> None:
    """A state file HAProxy never reads would not keep weights: check() says what to add."""
    with pytest.raises(PermanentError, match="server-state-file"):
        haproxy_service.router(state_file=tmp_path / "elsewhere").check()


def test_the_tcp_runtime_api_works_like_the_unix_socket(haproxy_service: HAProxyService) -> None:
    """`host:port` reaches the same runtime API as the UNIX socket."""
    router = haproxy_service.router(socket=f"127.0.0.1:{haproxy_service.tcp_port}")
    router.set_weight(25)
    assert haproxy_service.router().read_weight() == RouterState(25, False)
    router.set_weight(0)
    assert router.read_weight() == RouterState(0, False)


def test_a_hung_socket_times_out_quickly(fake: Callable[[Answer], FakeRuntimeAPI]) -> None:
    """A runtime API that never answers costs the timeout, not the whole tick."""
    router = HAProxyRouter(
        str(fake(lambda command: None).path), backend=BACKEND, stable=["a"], canary=["b"],
        timeout=0.2,
    )  # fmt: skip
    started = time.monotonic()
    with pytest.raises(TemporaryError, match=r"did not answer within 0\.2s"):
        router.read_weight()
    assert time.monotonic() - started < 1.0
