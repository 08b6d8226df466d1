"""What the gateway's capture costs per request, against the gateway's own per-request work.

    python3 bench/capture.py [--requests 2000] [--rounds 15] [--prompt-kb 24]

A request is the reference workload's: a system and a user message (``--prompt-kb`` of text:
~6,000 tokens is ~24 KB), the five tools of the simulated agent, and an answer with one tool
call. The baseline, measured in the same run, is what a gateway built on ``rolloutd.gateway``
does for every request anyway: decode the engine's JSON answer and count it in the reference
exporter (``request_finished``, ``tool_call``, per session). Then ``Capture.record`` is timed
alone at share 0 (the tools check and the draw only), 0.05 (a typical share) and 1.0 (every
request written), with and without two redaction rules, into a temporary directory on this
machine's disk. Figures are medians over ``--rounds`` rounds of ``--requests`` requests, in µs
per request, and as a share of the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from rolloutd.gateway import Capture, GatewayMetrics
from rolloutd.sim.cases import tool_definitions


def request(prompt_kb: int, i: int) -> dict[str, Any]:
    text = f"Please move the delivery of order ORD-{i:06d} to the new address. " * (
        prompt_kb * 1024 // 64
    )
    return {
        "model": "atlas-70b",
        "messages": [
            {"role": "system", "content": "You are the support agent."},
            {"role": "user", "content": text},
        ],
        "tools": tool_definitions(),
        "tool_choice": "auto",
        "temperature": 0.0,
        "metadata": {"user_id": f"u-{i}"},
    }


def answer_bytes(i: int) -> bytes:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {
            "name": "update_shipping_address",
            "arguments": json.dumps({"order_id": f"ORD-{i:06d}", "city": "Lyon", "zip": "69001"}),
        },
    }
    body = {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 6000, "completion_tokens": 40, "total_tokens": 6040},
    }
    return json.dumps(body).encode()


def per_request_us(work: Callable[[int], object], requests: int, rounds: int) -> float:
    """The median over rounds of the mean µs per request."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(requests):
            work(i)
        samples.append((time.perf_counter() - start) / requests * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--prompt-kb", type=int, default=24)
    args = parser.parse_args()

    bodies = [request(args.prompt_kb, i) for i in range(64)]
    answers = [answer_bytes(i) for i in range(64)]
    parsed = [json.loads(a) for a in answers]
    metrics = GatewayMetrics()

    def gateway(i: int) -> None:
        json.loads(answers[i % 64])
        session = f"s-{i // 15}"
        metrics.request_finished("stable", outcome="ok", duration_s=3.2, session=session)
        metrics.tool_call("stable", schema_ok=True, session=session)

    base = per_request_us(gateway, args.requests, args.rounds)
    rows = [("gateway's own work (baseline)", base)]
    rules = ["drop:request.metadata", "hash:response.choices[*].message.tool_calls[*].id"]
    with tempfile.TemporaryDirectory() as directory:
        for share in (0.0, 0.05, 1.0):
            for redact in ([], rules):
                capture = Capture(
                    directory, share=share, redact=redact, seed=1, max_bytes_per_day=2**40
                )

                def record(i: int, capture: Capture = capture) -> None:
                    capture.record(
                        bodies[i % 64],
                        answer=parsed[i % 64],
                        status_code=200,
                        pool="stable",
                        session=f"s-{i // 15}",
                    )

                label = f"capture, share {share:g}" + (", 2 redaction rules" if redact else "")
                rows.append((label, per_request_us(record, args.requests, args.rounds)))

    print(
        f"{args.requests} requests x {args.rounds} rounds, prompt {args.prompt_kb} KB, "
        "medians of the per-round mean"
    )
    print("| what | µs per request | over the gateway's own work |")
    print("|---|---|---|")
    for label, micros in rows:
        print(f"| {label} | {micros:.1f} | {micros / base:.2f} |")


if __name__ == "__main__":
    main()
