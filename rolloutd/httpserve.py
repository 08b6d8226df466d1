"""The threaded HTTP server behind rolloutd's own ports and the simulated services.

A client that hangs up before its answer (Prometheus giving up on a slow scrape at its
timeout, a probe that closes early, traffic that stops) is the client's business: the
write fails with a connection error, and that is not worth a traceback in the log. Any
other error in a handler still prints one, as :class:`~http.server.ThreadingHTTPServer`
does.

The listen backlog is 512, not :mod:`socketserver`'s 5: agent traffic opens connections in
bursts (every session of a traffic worker at once), and a full backlog resets them.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` with daemon threads, silent on clients that hang up."""

    daemon_threads = True
    request_queue_size = 512

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
