"""What the gateway's capture costs per request, against the gateway's own per-request work.

    python3 bench/capture.py [--requests 2000] [--rounds 7] [--prompt-kb 24]

A request is the reference workload's: a system and a user message (``--prompt-kb`` of text:
~6,000 tokens is ~24 KB), the five tools of the simulated agent, and an answer with one tool
call; sessions of 15 requests. Two baselines are measured in the same run, request by
request:

- *exporter*: what a gateway built on ``rolloutd.gateway`` does for every request anyway:
  decode the engine's answer and count it in the reference exporter (``request_finished`` and
  ``tool_call``, per session);
- *handler*: that, plus decoding the request body the agent sent (a gateway reads its
  ``tools`` and routes on its session), the least a JSON-aware gateway does.

``Capture.record`` is then timed alone: at share 0 (the tools check and the draw only), at a
typical 0.05 and at 1.0 (every request written), without and with redaction rules (three
cheap ones: drop the metadata, hash the ``user`` field, drop the tool calls' ids; and, the
costly kind, hashing every message's content), into a temporary directory on this machine's
disk, emptied between rounds. Variants take turns within each round, so drift spreads over
all. Each figure is over every request of every round: the median (at share 0.05, the cost
of a request not drawn) and the mean (what the share costs on average), in µs, and the mean
as a share of each baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolloutd.gateway import Capture, GatewayMetrics
from rolloutd.sim.cases import tool_definitions

BODIES = 64
SESSION_TURNS = 15
CHEAP_RULES = (
    "drop:request.metadata",
    "hash:request.user",
    "drop:response.choices[*].message.tool_calls[*].id",
)
CONTENT_RULES = (*CHEAP_RULES, "hash:request.messages[*].content")


def request(prompt_kb: int, i: int) -> dict[str, Any]:
    """Body ``i``: its user message differs in length from its neighbours', as a session's
    turns do, so each turn is drawn on its own."""
    text = (
        f"Please move the delivery of order ORD-{i:06d} to the new address. "
        * (prompt_kb * 1024 // 64)
        + "." * i
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
        "user": f"customer-{i}",
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


def timed(work: Callable[[int], object], requests: int, into: list[int]) -> None:
    """Run ``work`` for requests 0..requests-1, appending each one's ns to ``into``."""
    clock = time.perf_counter_ns
    for i in range(requests):
        start = clock()
        work(i)
        into.append(clock() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prompt-kb", type=int, default=24)
    args = parser.parse_args()

    bodies = [request(args.prompt_kb, i) for i in range(BODIES)]
    sent = [json.dumps(body).encode() for body in bodies]
    answers = [answer_bytes(i) for i in range(BODIES)]
    parsed = [json.loads(a) for a in answers]
    metrics = GatewayMetrics()

    def exporter(i: int) -> None:
        json.loads(answers[i % BODIES])
        session = f"s-{i // SESSION_TURNS}"
        metrics.request_finished("stable", outcome="ok", duration_s=3.2, session=session)
        metrics.tool_call("stable", schema_ok=True, session=session)

    def handler(i: int) -> None:
        json.loads(sent[i % BODIES])
        exporter(i)

    variants: list[tuple[str, float, tuple[str, ...]]] = [
        ("capture, share 0 (not drawn)", 0.0, ()),
        ("capture, share 0.05", 0.05, ()),
        ("capture, share 0.05, 3 cheap rules", 0.05, CHEAP_RULES),
        ("capture, share 1", 1.0, ()),
        ("capture, share 1, 3 cheap rules", 1.0, CHEAP_RULES),
        ("capture, share 1, + hash every message", 1.0, CONTENT_RULES),
    ]
    works: dict[str, Callable[[int], object]] = {
        "baseline: exporter (decode answer, count)": exporter,
        "baseline: handler (+ decode the request)": handler,
    }
    with tempfile.TemporaryDirectory() as scratch:
        captures = []
        for index, (label, share, rules) in enumerate(variants):
            capture = Capture(
                Path(scratch) / str(index),
                share=share,
                redact=rules,
                seed=1,
                max_bytes_per_day=2**40,
            )
            captures.append(capture)

            def record(i: int, capture: Capture = capture) -> None:
                capture.record(
                    bodies[i % BODIES],
                    answer=parsed[i % BODIES],
                    status_code=200,
                    pool="stable",
                    session=f"s-{i // SESSION_TURNS}",
                )

            works[label] = record
        timings: dict[str, list[int]] = {label: [] for label in works}
        for _ in range(args.rounds):
            for label, work in works.items():
                timed(work, args.requests, timings[label])
            for capture in captures:  # each round starts with empty files
                capture.close()
                for path in capture.directory.iterdir():
                    path.unlink()
        written = {label: c.captured for label, c in zip(list(works)[2:], captures, strict=True)}

    means = {label: statistics.fmean(ns) / 1000 for label, ns in timings.items()}
    exporter_mean = means["baseline: exporter (decode answer, count)"]
    handler_mean = means["baseline: handler (+ decode the request)"]
    print(
        f"{args.requests} requests x {args.rounds} rounds, prompt {args.prompt_kb} KB, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print("| what | median µs | mean µs | mean / exporter | mean / handler | written |")
    print("|---|---|---|---|---|---|")
    for label, ns in timings.items():
        median = statistics.median(ns) / 1000
        mean = means[label]
        count = written.get(label)
        print(
            f"| {label} | {median:.1f} | {mean:.1f} | {mean / exporter_mean:.2f} | "
            f"{mean / handler_mean:.2f} | {'' if count is None else count} |"
        )


if __name__ == "__main__":
    main()
