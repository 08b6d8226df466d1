"""The health port under a client that hangs up before its answer."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.request

import pytest

from rolloutd.daemon.health import HealthServer

# Larger than any socket buffer, so writing it to a closed connection must fail.
BIG = b"# a large exposition\n" * 400_000


def _handlers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "process_request" in t.name}


def test_a_scrape_that_hangs_up_mid_answer_prints_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Prometheus gives up on a slow ``/metrics`` at its scrape timeout and closes the
    connection; the daemon's port must not print a traceback to its log for that, and must
    keep answering."""
    served = threading.Event()

    def metrics() -> tuple[list[bytes], str]:
        served.set()
        return [BIG], "text/plain"

    server = HealthServer("127.0.0.1", 0, lambda: (True, {"role": "leader"}), metrics=metrics)
    server.start()
    others = _handlers()  # servers of earlier tests in this process may still hold threads
    try:
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert served.wait(5)
        # Close with a reset, as a client that gives up does: the server's write then fails.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        deadline = time.monotonic() + 5
        while _handlers() - others and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _handlers() - others, "the request was still being handled after 5 s"

        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as r:
            assert json.loads(r.read()) == {"role": "leader"}
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "Exception occurred" not in err
