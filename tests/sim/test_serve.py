"""``rolloutctl sim serve``: one simulated replica from the command line, answering the real
engine's API until SIGTERM; bad arguments exit 2 with one message naming the argument."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from rolloutd.sim.cases import make_case, rng_for, tool_definitions

CTL = [sys.executable, "-m", "rolloutd.cli.ctl"]


@contextmanager
def serving(*argv: str) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """``rolloutctl sim serve ARGV -o json`` in a subprocess: its ready line and the process,
    stopped with SIGTERM afterwards."""
    process = subprocess.Popen(
        [*CTL, "sim", "serve", *argv, "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else ""
        yield json.loads(line), process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


@pytest.mark.parametrize(
    ("engine", "health"), [("vllm", "/health"), ("triton", "/v2/health/ready")]
)
def test_serve_answers_health_and_a_chat_completion_then_stops_on_sigterm(
    engine: str, health: str
) -> None:
    """On a free port the replica prints its URL, answers its engine's health endpoint, the
    OpenAI chat API with the expected tool call and /metrics, and exits 0 on SIGTERM."""
    case = make_case(rng_for("serve", 3), "serve-3")
    with serving("--engine", engine, "--port", "0") as (ready, process):
        url = ready["url"]
        assert ready["engine"] == engine and ready["health"] == url + health
        assert httpx.get(url + health, timeout=10).status_code == 200
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={
                "model": "atlas-70b",
                "messages": [{"role": "user", "content": case.message}],
                "tools": tool_definitions(),
                "rolloutd_expected": case.expected(),
            },
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        call = answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == case.expected()["name"]
        assert json.loads(call["arguments"]) == case.expected()["arguments"]
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert ("vllm:" if engine == "vllm" else "nv_inference_") in metrics
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0


def test_the_broken_schema_profile_answers_calls_that_break_the_schema() -> None:
    """--profile reaches the replica: broken-schema never returns the expected arguments."""
    case = make_case(rng_for("serve", 3), "serve-3")
    with serving("--engine", "vllm", "--port", "0", "--profile", "broken-schema") as (ready, _):
        answer = httpx.post(
            ready["url"] + "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": case.message}],
                "tools": tool_definitions(),
                "rolloutd_expected": case.expected(),
            },
            timeout=30,
        )
    call = answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["arguments"] != json.dumps(case.expected()["arguments"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--engine", "tgi"], "--engine"),
        (["--profile", "fp4"], "--profile"),
        (["--port", "70000"], "--port"),
        (["--port", "http"], "--port"),
        (["--port", "-1"], "--port"),
        (["--host", "nope.invalid", "--port", "0"], "--host"),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(argv: list[str], named: str) -> None:
    """An unknown engine or profile, a port outside 0-65535 or a host that is not this
    machine's is bad input: exit 2, the option named, no traceback."""
    done = subprocess.run(
        [*CTL, "sim", "serve", *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert named in done.stderr and "Traceback" not in done.stderr


def test_a_port_in_use_exits_2_naming_the_port() -> None:
    """A port another process holds is refused in one line naming --port (exit 2)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*CTL, "sim", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--port" in lines[0] and str(port) in lines[0], done.stderr
