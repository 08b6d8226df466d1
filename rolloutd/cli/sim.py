"""``rolloutctl sim``: simulated engines from the command line, for a first try by hand.

``sim serve`` runs one replica that answers as vLLM or Triton do; ``sim fleet``
(``sim_fleet``) runs a reference deployment, a staging pair and the splitters in front of
them, and writes what an operator needs to drive a real rollout of it from other terminals
(artefacts to pin, plans, the metrics file a separate ``rolloutd run`` reads). Both serve
until SIGINT or SIGTERM. ``sim restart`` (``sim_restart``) is the systemd executor's restart
command on the simulated vLLM boxes. Like every ``rolloutctl`` module this one imports only
click at start-up.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

import click

from rolloutd.cli.common import OUTPUT
from rolloutd.cli.sim_common import TIME_SCALE, listening, ready, serve_until, stop_on_signal
from rolloutd.cli.sim_fleet import fleet_command
from rolloutd.cli.sim_restart import restart_command

if TYPE_CHECKING:
    from rolloutd.sim.profiles import Profile

ENGINES = ("vllm", "triton")
PROFILES = ("exact", "int4-like", "broken-schema")  # rolloutd.sim.profiles.PROFILES
HEALTH = {"vllm": "/health", "triton": "/v2/health/ready"}


@click.group("sim")
def sim_group() -> None:
    """Run simulated inference engines: one replica, or a whole fleet to roll out on.

    \b
    Examples:
      rolloutctl sim serve --engine triton --port 8000
      rolloutctl sim fleet --dir sim
      rolloutctl sim fleet --deployment support-70b --dir sim-support
    """


@sim_group.command("serve")
@click.option("--engine", type=click.Choice(ENGINES), default="vllm", help="Which API to serve.")
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default="exact",
    help="How its tool calls come out: exact, like an int4 build, or breaking the schema.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, help="0: a free port.")
@click.option("--host", default="127.0.0.1", help="The address to listen on.")
@click.option(
    "--max-seq-len",
    type=click.IntRange(256, 1_048_576),
    default=32768,
    help="The engine's max_seq_len: with the KV cache it decides how many sequences fit.",
)
@TIME_SCALE
@OUTPUT
def serve(
    engine: str,
    profile: str,
    port: int,
    host: str,
    max_seq_len: int,
    time_scale: float,
    output: str,
) -> None:
    """Serve one simulated engine replica until SIGINT or SIGTERM.

    It answers the real engine's API: OpenAI-compatible POST /v1/chat/completions and
    GET /v1/models, GET /metrics with the engine's own metric names, and the health
    endpoint (vLLM: /health; Triton: /v2/health/ready, plus the model repository API that
    loads and unloads models). The model is atlas-70b on 4x L40S; the capacity model decides
    queueing and timeouts. Prints one line with the URL once it answers.

    \b
    Examples:
      rolloutctl sim serve --engine triton --port 8000
      rolloutctl sim serve --engine vllm --profile int4-like --port 0 -o json
      curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' \\
          -d '{"messages": [{"role": "user", "content": "hi"}]}'
    """
    import dataclasses

    from rolloutd.sim.config import REFERENCE_STABLE
    from rolloutd.sim.engine import Replica

    stop = stop_on_signal()
    config = dataclasses.replace(REFERENCE_STABLE, max_seq_len=max_seq_len)
    replica = Replica(
        f"sim-{engine}",
        flavor="vllm" if engine == "vllm" else "triton",
        profile=cast("Profile", profile),
        config=config,
        time_scale=time_scale,
    )
    with listening("--port", host, port):
        replica.start(port, host)
    try:
        data = {
            "url": replica.url,
            "engine": engine,
            "profile": profile,
            "health": replica.url + HEALTH[engine],
            "max_seq_len": max_seq_len,
            "pid": os.getpid(),
        }
        ready(
            data,
            output,
            f"{engine} replica (profile {profile}) serving at {replica.url}; "
            "Ctrl-C or SIGTERM stops it",
        )
        serve_until(stop)
    finally:
        replica.stop()


sim_group.add_command(fleet_command)
sim_group.add_command(restart_command)
