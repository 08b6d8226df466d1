"""What the suite runner costs: wall time against the ideal, and its CPU per case.

    python3 bench/eval_suite.py [--latency 0.1] [--concurrency 32] [--repeats 3]

Starts a minimal OpenAI-compatible endpoint in a *separate process* (a threaded
http.server that sleeps a fixed latency, then answers each case with its expected call),
so that the runner's CPU time is measured alone. Runs the 300-case example suite through
the runner at the given concurrency and prints, per repeat: cases, concurrency, latency,
wall time, the ideal ``ceil(cases / concurrency) x latency``, their ratio, and the runner's
CPU milliseconds per case (process time of this process over the run, which includes
request building, JSON parsing and the schema-aware scoring).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path

from rolloutd.evaluation.runner import RunnerOptions, run_suite
from rolloutd.evaluation.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "gates" / "suites" / "tool-args-300.jsonl"


def serve(latency: float, ready: Connection) -> None:
    """Serve chat completions on 127.0.0.1 with a fixed latency until killed."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            """/v1/models."""
            self._json({"data": [{"id": "bench"}]})

        def do_POST(self) -> None:
            """One chat completion: sleep, then call the expected tool."""
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            expected = body.get("rolloutd_expected") or {"name": "none", "arguments": {}}
            call = {"name": expected["name"], "arguments": json.dumps(expected["arguments"])}
            message = {"role": "assistant", "tool_calls": [{"type": "function", "function": call}]}
            self._json({"choices": [{"index": 0, "message": message}]})

        def _json(self, data: object) -> None:
            payload = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 512

    server = Server(("127.0.0.1", 0), Handler)
    ready.send(server.server_address[1])
    server.serve_forever()


def main() -> None:
    """Start the endpoint, run the suite, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    suite = load_suite(SUITE)
    receive, send = multiprocessing.Pipe(duplex=False)
    server = multiprocessing.Process(target=serve, args=(args.latency, send), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{receive.recv()}"
    options = RunnerOptions(concurrency=args.concurrency, send_expected=True, model="bench")
    ideal = math.ceil(len(suite) / args.concurrency) * args.latency
    print(
        f"| {'cases':>5} | {'conc.':>5} | {'latency':>7} | {'wall s':>6} | {'ideal s':>7} "
        f"| {'ratio':>5} | {'CPU ms/case':>11} | {'exact':>5} |"
    )
    try:
        for _ in range(args.repeats):
            cpu, wall = time.process_time(), time.perf_counter()
            run = run_suite(suite, url, options=options)
            wall = time.perf_counter() - wall
            cpu = time.process_time() - cpu
            print(
                f"| {len(suite):5} | {args.concurrency:5} | {args.latency:6.3f}s | {wall:6.3f} "
                f"| {ideal:7.3f} | {wall / ideal:5.2f} | {1000 * cpu / len(suite):11.2f} "
                f"| {run.exact:5} |"
            )
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
