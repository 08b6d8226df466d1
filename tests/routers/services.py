"""Real HAProxy and NGINX on 127.0.0.1 for the router tests and the bench.

Two small HTTP pools (threads of :mod:`http.server`) answer every request with their pool's
name; HAProxy and NGINX are started from configurations written to a temporary directory,
in front of those pools, on free high ports. :func:`route` sends real requests through them.
"""

from __future__ import annotations

import http.client
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from random import Random

from rolloutd.httpserve import QuietServer
from rolloutd.routers.haproxy import HAProxyRouter
from rolloutd.routers.nginx import NginxRouter
from rolloutd.routers.nginx_conf import Names, Split, render
from rolloutd.routers.nginx_process import children
from tests.required import missing

HEADER = "X-Session-Id"
STABLE_SERVERS = ("gpu-a", "gpu-b", "gpu-c")
CANARY_SERVERS = ("gpu-d", "gpu-e")
BACKEND = "llm"
STATIC_BACKEND = "llm_static"
UPSTREAMS = ("llm_stable", "llm_canary")
REQUEST = b'{"model": "atlas-70b", "messages": [{"role": "user", "content": "next turn"}]}'


def which(name: str) -> str | None:
    """The path of ``name`` on PATH or in the sbin directories Debian installs daemons to."""
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/local/sbin/{name}") if os.access(p, os.X_OK)),
        None,
    )


def find_binary(name: str) -> str:
    """The path of ``name``; a missing binary fails the test (see ``tests.required``)."""
    path = which(name)
    if path is None:
        missing(f"{name} is not installed", f"install {name} (bash .ci/run does)")
    return path


# Below the kernel's ephemeral range (32768-60999 by default): a port handed out here is
# bound by a service a moment later, and in between an outgoing connection (Prometheus
# scraping, the traffic generator) would otherwise take it from the ephemeral range.
_PORTS = (20000, 32000)
# Every port this process has handed out: one is often bound seconds after it is drawn (the
# e2e daemon's, after HAProxy and Prometheus have started), and nothing listening on it yet
# must not make it free for the next service.
_handed: set[int] = set()
_handed_lock = threading.Lock()


def port_range() -> tuple[int, int]:
    """The ports this test process draws from (both ends included): under pytest-xdist each
    worker has a slice of its own, so two workers never hand out the same port."""
    low, high = _PORTS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return low, high - 1
    index, count = int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    width = (high - low) // max(count, index + 1)
    return low + index * width, low + (index + 1) * width - 1


def _draw(low: int, high: int) -> int:
    return random.randint(low, high)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that this process has
    not handed out before, outside the range the kernel hands to outgoing connections."""
    low, high = port_range()
    with _handed_lock:
        for _ in range(200):
            port = _draw(low, high)
            if port in _handed:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed.add(port)
            return port
    raise RuntimeError(f"no free port in {low}-{high} after 200 tries")


def session_ids(count: int, seed: int = 4) -> list[str]:
    """``count`` distinct UUID4 session ids, the same for the same seed."""
    rng = Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(count)]


def binomial_interval(n: int, p: float, confidence: float = 0.999) -> tuple[int, int]:
    """The central range of Binomial(n, p) holding ``confidence`` of its mass."""
    tail = (1 - confidence) / 2
    pmf = [
        math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log1p(-p)
        )
        for k in range(n + 1)
    ]
    low, below = 0, 0.0
    while below + pmf[low] <= tail:
        below += pmf[low]
        low += 1
    high, above = n, 0.0
    while above + pmf[high] <= tail:
        above += pmf[high]
        high -= 1
    return low, high


class Pool:
    """An HTTP server standing for one engine pool: answers its name, counts what it saw."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.hits: Counter[str] = Counter()
        self.mirrored: Counter[str] = Counter()
        pool = self
        body = name.encode()
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                session = self.headers.get(HEADER, "")
                (pool.mirrored if self.headers.get("X-Mirrored") else pool.hits)[session] += 1
                self.wfile.write(answer)

            do_GET = do_POST

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Pools:
    """The stable and the canary pool."""

    def __init__(self) -> None:
        self.stable = Pool("stable")
        self.canary = Pool("canary")

    def close(self) -> None:
        self.stable.close()
        self.canary.close()


def route(
    port: int,
    sessions: Sequence[str | None],
    *,
    connections: int = 4,
) -> list[str]:
    """POST one chat request per entry through the proxy at ``port``; which pool answered each.

    ``None`` sends a request without the session header. Requests share a few keep-alive
    connections, as a gateway multiplexing many sessions would.
    """
    answers: list[str] = [""] * len(sessions)

    def worker(indexes: Iterable[int]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in indexes:
            session = sessions[i]
            headers = {"Content-Type": "application/json", **({HEADER: session} if session else {})}
            for attempt in (1, 2):
                try:
                    conn.request("POST", "/v1/chat/completions", body=REQUEST, headers=headers)
                    answer = conn.getresponse()
                    body = answer.read().decode()
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    # The proxy closed an idle keep-alive connection (an nginx reload does):
                    # reconnect and send again, as any HTTP client does.
                    conn.close()
                    if attempt == 2:
                        raise
            answers[i] = body if answer.status == 200 else f"HTTP {answer.status}"
        conn.close()

    threads = [
        threading.Thread(target=worker, args=(range(k, len(sessions), connections),))
        for k in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def wait_for(condition: object, what: str, timeout: float = 5.0) -> None:
    """Poll ``condition()`` until it is true, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"{what} did not happen within {timeout}s")


class HAProxyService:
    """A real haproxy in the foreground, with a consistent-hash backend and a static one."""

    def __init__(self, directory: Path, pools: Pools, binary: str) -> None:
        self._prepare(directory, binary)
        stable = "\n".join(
            f"    server {name} 127.0.0.1:{pools.stable.port} weight 1" for name in STABLE_SERVERS
        )
        canary = "\n".join(
            f"    server {name} 127.0.0.1:{pools.canary.port} weight 0" for name in CANARY_SERVERS
        )
        self._write_config(
            f"{stable}\n{canary}",
            timeout="10s",
            more_sockets=f"""    stats socket ipv4@127.0.0.1:{self.tcp_port} level admin
    stats socket {self.operator_socket} mode 600 level operator
""",
            routing=f"    use_backend {STATIC_BACKEND} if {{ path_beg /static }}\n",
            more_backends=f"""
backend {STATIC_BACKEND}
    balance hdr({HEADER})
    server gpu-a 127.0.0.1:{pools.stable.port} weight 100
    server gpu-d 127.0.0.1:{pools.canary.port} weight 100
""",
        )

    def _prepare(self, directory: Path, binary: str) -> None:
        """Where this haproxy keeps its sockets, state, config and log, and its ports."""
        self.directory = directory
        self.binary = binary
        self.socket = directory / "admin.sock"
        self.operator_socket = directory / "operator.sock"
        self.state_file = directory / "server-state"
        self.config = directory / "haproxy.cfg"
        self.log = directory / "haproxy.log"
        self.port = free_port()
        self.tcp_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def _write_config(
        self,
        servers: str,
        *,
        timeout: str,
        more_sockets: str = "",
        routing: str = "",
        more_backends: str = "",
    ) -> None:
        """The config file: the admin runtime API (and ``more_sockets``), the ``sessions``
        frontend (``routing`` before its default) to the sticky backend of ``servers``, then
        ``more_backends``; ``timeout`` for clients and servers alike."""
        self.config.write_text(
            f"""global
    stats socket {self.socket} mode 600 level admin
{more_sockets}    server-state-file {self.state_file}

defaults
    mode http
    timeout connect 2s
    timeout client {timeout}
    timeout server {timeout}
    load-server-state-from-file global

frontend sessions
    bind 127.0.0.1:{self.port}
{routing}    default_backend {BACKEND}

backend {BACKEND}
    balance hdr({HEADER})
    hash-type consistent
{servers}
{more_backends}"""
        )

    def start(self) -> None:
        """Start haproxy and wait until its runtime API answers."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "-db", "-f", str(self.config)], stdout=log, stderr=log
            )
        wait_for(self._answers, f"haproxy on {self.socket}")

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(self.socket))
            conn.sendall(b"show info\n")
            return conn.recv(10).startswith(b"Name")

    def stop(self) -> None:
        """Stop haproxy at once (SIGKILL leaves the socket file behind, as a crash does)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def router(self, **overrides: object) -> HAProxyRouter:
        """A driver for the consistent-hash backend (keyword arguments override)."""
        arguments: dict[str, object] = {
            "backend": BACKEND,
            "stable": STABLE_SERVERS,
            "canary": CANARY_SERVERS,
            "config_path": self.config,
            "state_file": self.state_file,
            "session_header": HEADER,
        }
        arguments.update(overrides)
        socket_path = str(arguments.pop("socket", self.socket))
        return HAProxyRouter(socket_path, **arguments)  # type: ignore[arg-type]


class NginxService:
    """A real nginx (daemon on, temp prefix) with the split include and a mirror location."""

    def __init__(self, directory: Path, pools: Pools, binary: str) -> None:
        self.directory = directory
        self.binary = binary
        self.config = directory / "nginx.conf"
        self.include = directory / "rolloutd-split.conf"
        self.extra = directory / "extra.conf"
        self.pid_file = directory / "nginx.pid"
        self.port = free_port()
        self.names = Names("rolloutd_pool", HEADER, *UPSTREAMS)
        temp = directory / "tmp"
        temp.mkdir(exist_ok=True)
        temp.chmod(0o777)
        paths = "\n".join(
            f"    {kind}_temp_path {temp / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        self.include.write_text(render(self.names, Split(0, False)))
        self.extra.write_text("# extra directives for the tests\n")
        self.config.write_text(
            f"""daemon on;
pid {self.pid_file};
error_log {directory / "error.log"} notice;
worker_processes 1;
events {{ worker_connections 512; }}

http {{
    access_log off;
{paths}
    upstream {UPSTREAMS[0]} {{ server 127.0.0.1:{pools.stable.port}; keepalive 16; }}
    upstream {UPSTREAMS[1]} {{ server 127.0.0.1:{pools.canary.port}; keepalive 16; }}
    include {self.extra};
    include {self.include};

    server {{
        listen 127.0.0.1:{self.port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location / {{
            mirror /_rolloutd_mirror;
            proxy_pass http://$rolloutd_pool;
        }}
        location = /_rolloutd_mirror {{
            internal;
            if ($rolloutd_pool_mirror = 0) {{ return 204; }}
            proxy_set_header X-Mirrored 1;
            proxy_pass http://{UPSTREAMS[1]}$request_uri;
        }}
        location = /.rolloutd/state {{
            return 200 "$rolloutd_pool_state\\n";
        }}
    }}
}}
"""
        )

    @property
    def verify_url(self) -> str:
        """The location that answers what the workers loaded."""
        return f"http://127.0.0.1:{self.port}/.rolloutd/state"

    def command(self, *args: str) -> list[str]:
        """An nginx command line for this instance."""
        return [
            self.binary,
            "-e",
            "stderr",
            "-c",
            str(self.config),
            "-p",
            str(self.directory),
            *args,
        ]

    def start(self) -> None:
        """Start nginx (it daemonises) and wait until it answers."""
        subprocess.run(self.command(), check=True, capture_output=True)
        wait_for(self._answers, f"nginx on port {self.port}")

    def _answers(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
        conn.request("GET", "/.rolloutd/state")
        return conn.getresponse().status == 200

    def master(self) -> int:
        """The master's pid, from the pid file."""
        return int(self.pid_file.read_text())

    def reload(self) -> None:
        """Reload by hand and wait until only workers of the new configuration accept."""
        master = self.master()
        before = set(children(master))
        subprocess.run(self.command("-s", "reload"), check=True, capture_output=True)

        def reloaded() -> bool:
            now = children(master)
            old = [c for pid, c in now.items() if pid in before and c.accepting]
            return bool(set(now) - before) and not old

        wait_for(reloaded, "nginx reload")

    def stop(self) -> None:
        """Stop nginx and wait until the master is gone."""
        try:
            pid = self.master()
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            return
        wait_for(lambda: not _alive(pid), f"nginx master {pid} to exit")

    def router(self, **overrides: object) -> NginxRouter:
        """A driver for this instance (keyword arguments override)."""
        arguments: dict[str, object] = {
            "stable_upstream": UPSTREAMS[0],
            "canary_upstream": UPSTREAMS[1],
            "config_path": self.config,
            "pid_file": self.pid_file,
            "nginx_binary": self.binary,
            "prefix": str(self.directory),
            "session_header": HEADER,
            "verify_url": self.verify_url,
        }
        arguments.update(overrides)
        return NginxRouter(self.include, **arguments)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
