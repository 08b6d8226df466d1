"""What the suite runner costs: wall time against the ideal, and its CPU per case.

    python3 bench/eval_suite.py [--latency 0.1] [--concurrency 32] [--repeats 3] [--pools 2]

Starts a minimal OpenAI-compatible endpoint in a *separate process*, so that the runner's
CPU time is measured alone: an asyncio server that answers each request, with the case's
expected call, exactly ``latency`` after the request's last byte arrived (a timer per
request, not a sleeping thread). Runs the 300-case example suite through the runner at the
given concurrency and prints, per repeat: cases, concurrency, latency, wall time, the ideal
``ceil(cases / concurrency) x latency``, their ratio, the runner's CPU milliseconds per case
(process time of this process over the run, which includes request building, JSON parsing
and the schema-aware scoring) and the endpoint's.

With ``--pools 2`` it replays the suite to two endpoints at once (two endpoint processes),
as a suite gate's run does to the stable and the canary replica: the wall time is that of
both, against the same ideal, and the CPU per case counts both pools' cases.

The figures are about the runner, not the endpoint. The endpoint used to be a threaded
http.server, and at concurrency 128 it was the bottleneck: 0.7-0.9 ms of its CPU per request
with 128 threads waking together, so that even a bare asyncio client that only wrote and
read bytes took 1.25-1.3x the ideal. This endpoint spends 0.1-0.2 ms per request (the last
column), a small part of what the ideal allows. With two cores, the endpoint and the runner
each have one; the runner's startup (a session, one connection per worker) counts in the
first wave, as it does in a real run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import time
from multiprocessing.connection import Connection
from pathlib import Path

from rolloutd.evaluation.results import RunSummary
from rolloutd.evaluation.runner import RunnerOptions, run_suite_async
from rolloutd.evaluation.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "gates" / "suites" / "tool-args-300.jsonl"


def answer(method: str, body: bytes) -> bytes:
    """The JSON an OpenAI-compatible engine would send: its model list, or the expected call."""
    if method == "GET":
        return json.dumps({"data": [{"id": "bench"}]}).encode()
    expected = json.loads(body).get("rolloutd_expected") or {"name": "none", "arguments": {}}
    call = {"name": expected["name"], "arguments": json.dumps(expected["arguments"])}
    message = {"role": "assistant", "tool_calls": [{"type": "function", "function": call}]}
    return json.dumps({"choices": [{"index": 0, "message": message}]}).encode()


class FixedLatency(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; each request is answered ``latency`` seconds after
    its last byte arrived, by a timer rather than a sleeping thread."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.received = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport to answer on."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        """Take every complete request in the buffer and schedule its answer."""
        self.received += data
        while (end := self.received.find(b"\r\n\r\n")) >= 0:
            lines = self.received[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.received) < end + 4 + length:
                return
            body = bytes(self.received[end + 4 : end + 4 + length])
            del self.received[: end + 4 + length]
            payload = answer(lines[0].split(" ", 1)[0], body)
            asyncio.get_running_loop().call_later(self.latency, self.send, payload)

    def send(self, payload: bytes) -> None:
        """Write one 200 answer, unless the client has gone."""
        if self.transport is None or self.transport.is_closing():
            return
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        self.transport.write(head.encode() + payload)


def serve(latency: float, control: Connection) -> None:
    """Serve chat completions on 127.0.0.1 with a fixed latency until killed; send the port on
    ``control``, then the process's CPU seconds whenever anything arrives on it."""

    async def forever() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: FixedLatency(latency), "127.0.0.1", 0, backlog=1024
        )
        control.send(server.sockets[0].getsockname()[1])
        loop.add_reader(control.fileno(), report_cpu)
        await server.serve_forever()

    def report_cpu() -> None:
        control.recv()
        control.send(time.process_time())

    asyncio.run(forever())


def main() -> None:
    """Start the endpoint, run the suite, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pools", type=int, choices=(1, 2), default=1, help="endpoints at once")
    args = parser.parse_args()

    suite = load_suite(SUITE)
    endpoints = []
    for _ in range(args.pools):
        control, remote = multiprocessing.Pipe()
        server = multiprocessing.Process(target=serve, args=(args.latency, remote), daemon=True)
        server.start()
        endpoints.append((server, control, f"http://127.0.0.1:{control.recv()}"))

    def endpoint_cpu() -> float:
        total = 0.0
        for _, control, _ in endpoints:
            control.send("cpu?")
            total += float(control.recv())
        return total

    async def replay() -> list[RunSummary]:
        return await asyncio.gather(
            *(run_suite_async(suite, url, options=options) for _, _, url in endpoints)
        )

    options = RunnerOptions(concurrency=args.concurrency, send_expected=True, model="bench")
    ideal = math.ceil(len(suite) / args.concurrency) * args.latency
    cases = len(suite) * args.pools
    print(
        f"| {'pools':>5} | {'cases':>5} | {'conc.':>5} | {'latency':>7} | {'wall s':>6} "
        f"| {'ideal s':>7} | {'ratio':>5} | {'CPU ms/case':>11} | {'endpoint':>8} | {'exact':>5} |"
    )
    try:
        for _ in range(args.repeats):
            served, cpu, wall = endpoint_cpu(), time.process_time(), time.perf_counter()
            runs = asyncio.run(replay())
            wall = time.perf_counter() - wall
            cpu = time.process_time() - cpu
            served = endpoint_cpu() - served
            print(
                f"| {args.pools:5} | {cases:5} | {args.concurrency:5} | {args.latency:6.3f}s "
                f"| {wall:6.3f} | {ideal:7.3f} | {wall / ideal:5.2f} | {1000 * cpu / cases:11.2f} "
                f"| {1000 * served / cases:8.2f} | {sum(run.exact for run in runs):5} |"
            )
    finally:
        for server, _, _ in endpoints:
            server.terminate()
            server.join()


if __name__ == "__main__":
    main()
