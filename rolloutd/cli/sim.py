"""``rolloutctl sim``: simulated engines from the command line, for a first try by hand.

``sim serve`` runs one replica that answers as vLLM or Triton do; ``sim fleet`` runs the
reference deployment, a staging pair and the splitter in front of them, and writes what an
operator needs to drive a real rollout of it from other terminals (artefacts to pin, plans,
the metrics file a separate ``rolloutd run`` reads). Both serve until SIGINT or SIGTERM.
Like every ``rolloutctl`` module this one imports only click at start-up.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from rolloutd.cli.common import OUTPUT, FiniteFloatRange
from rolloutd.errors import BadInput

if TYPE_CHECKING:
    from rolloutd.sim.fleet import Fleet
    from rolloutd.sim.profiles import Profile

ENGINES = ("vllm", "triton")
PROFILES = ("exact", "int4-like", "broken-schema")  # rolloutd.sim.profiles.PROFILES
HEALTH = {"vllm": "/health", "triton": "/v2/health/ready"}
TIME_SCALE = click.option(
    "--time-scale",
    type=FiniteFloatRange(min=1e-4, max=1.0),
    default=0.01,
    help="Wall seconds per simulated second (0.01: a 10 s generation answers in 0.1 s).",
)
# The production replicas, the staging pair, then the two splitters, from --port-base on.
PRODUCTION = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")
STAGING = ("stg-a", "stg-b")
PORTS_USED = len(PRODUCTION) + len(STAGING) + 2
PLANS = {"production": "atlas-70b-maxseq8192.yaml", "staging": "atlas-70b-staging.yaml"}


@click.group("sim")
def sim_group() -> None:
    """Run simulated inference engines: one replica, or a whole fleet to roll out on.

    \b
    Examples:
      rolloutctl sim serve --engine triton --port 8000
      rolloutctl sim fleet --dir sim
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

    stop = _stop_on_signal()
    config = dataclasses.replace(REFERENCE_STABLE, max_seq_len=max_seq_len)
    replica = Replica(
        f"sim-{engine}",
        flavor="vllm" if engine == "vllm" else "triton",
        profile=cast("Profile", profile),
        config=config,
        time_scale=time_scale,
    )
    with _listening("--port", host, port):
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
        _ready(
            data,
            output,
            f"{engine} replica (profile {profile}) serving at {replica.url}; "
            "Ctrl-C or SIGTERM stops it",
        )
        _serve_until(stop)
    finally:
        replica.stop()


@sim_group.command("fleet")
@click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False),
    help="Where to write the artefacts, plans, weights and metrics files.",
)
@click.option(
    "--port-base",
    type=click.IntRange(0, 65535 - PORTS_USED + 1),
    default=0,
    help=f"The first of {PORTS_USED} consecutive ports (gpu-a..gpu-d, stg-a, stg-b, the "
    "production and staging splitters); 0: free ports.",
)
@click.option(
    "--agents",
    type=click.IntRange(0, 64),
    default=4,
    help="Concurrent agent sessions sent through the production splitter; 0: no traffic.",
)
@click.option(
    "--plans",
    "plans_dir",
    default="config/plans",
    type=click.Path(file_okay=False),
    help=f"Where the reference plans are ({', '.join(PLANS.values())}).",
)
@click.option("--seed", type=int, default=0, help="Seed of the engines and the traffic.")
@TIME_SCALE
@OUTPUT
def fleet(
    directory: str,
    port_base: int,
    agents: int,
    plans_dir: str,
    seed: int,
    time_scale: float,
    output: str,
) -> None:
    """Serve the reference fleet and a staging pair, and write what a rollout of it needs.

    Production: gpu-a..gpu-c (stable, max_seq_len 32,768) and gpu-d (canary, 8,192),
    simulated Triton, behind a session-hash splitter that follows the file router's
    weights; --agents sessions of agent traffic through it. Staging: stg-a and stg-b behind
    their own splitter. In DIR: models/ and engine-*.json (the two artefact sets to pin),
    plans/ (the reference plans with only their replica URLs, router and metrics source
    pointed here), metrics.json and metrics-staging.json (rewritten every 2 s: the file
    metrics source), capture/ (a fifth of the agents' tool calls, in OpenAI Batch format,
    for the live-traffic suite gates), and fleet.env (the URLs, written last: the fleet is
    ready). Serves until SIGINT or SIGTERM.

    \b
    Examples:
      rolloutctl sim fleet --dir sim &
      rolloutctl sim fleet --dir /tmp/fleet --port-base 18000 --agents 0 -o json
    """
    stop = _stop_on_signal()
    root = Path(directory)
    sources = {env: Path(plans_dir) / name for env, name in PLANS.items()}
    originals = {env: _read_plan(path, "--plans") for env, path in sources.items()}
    root.mkdir(parents=True, exist_ok=True)
    env_file = root / "fleet.env"
    # A stale one would say "ready" before this fleet is.
    env_file.unlink(missing_ok=True)
    with ExitStack() as stack:
        started = _start_fleet(stack, root.resolve(), port_base, agents, seed, time_scale)
        data = _write_dir(root, sources, originals, started)
        stack.callback(env_file.unlink, missing_ok=True)
        from rolloutd.sim.fleetdir import write_env

        write_env(env_file, data["env"])
        _ready(data, output, None)
        if output != "json":
            _say_fleet(directory, data)
        _serve_until(stop)


CAPTURE_SHARE = 0.2
"""The share of tool-calling requests the fleet's gateway captures into DIR/capture."""


def _start_fleet(
    stack: ExitStack, root: Path, port_base: int, agents: int, seed: int, time_scale: float
) -> dict[str, Any]:
    """Start both environments' replicas, splitters, metrics files and the traffic; each
    stops when ``stack`` closes."""
    from rolloutd.demo.splitter import Splitter
    from rolloutd.gateway import Capture
    from rolloutd.sim.config import REFERENCE_CANARY
    from rolloutd.sim.fleet import Fleet, ReplicaSpec
    from rolloutd.sim.metricsfile import MetricsFileWriter
    from rolloutd.sim.traffic import TrafficGenerator

    names = [*PRODUCTION, *STAGING, "splitter", "staging-splitter"]
    ports = {name: port_base + i if port_base else 0 for i, name in enumerate(names)}
    fleets = {
        "production": Fleet.reference(seed=seed, time_scale=time_scale),
        "staging": Fleet(
            [
                ReplicaSpec("stg-a", "stable"),
                ReplicaSpec("stg-b", "canary", config=REFERENCE_CANARY),
            ],
            seed=seed,
            time_scale=time_scale,
        ),
    }
    splitters: dict[str, Any] = {}
    for env, suffix in (("production", ""), ("staging", "-staging")):
        one: Fleet = fleets[env]
        with _listening("--port-base", "127.0.0.1", port_base):
            one.start(ports)
        stack.callback(one.stop)
        pools = {pool: list(one.urls(pool).values()) for pool in ("stable", "canary")}
        splitter_port = ports["splitter" if env == "production" else "staging-splitter"]
        with _listening("--port-base", "127.0.0.1", port_base):
            splitter = Splitter(root / f"weights{suffix}.json", pools, port=splitter_port).start()
        stack.callback(splitter.stop)
        splitters[env] = splitter
        writer = MetricsFileWriter(one.metrics(), root / f"metrics{suffix}.json", period=2.0)
        stack.callback(writer.stop)
        writer.start()
    if agents:
        production = fleets["production"]
        # The gateway captures a fifth of the tool-calling requests, as a deployment's would:
        # the live-traffic suite gates sample what the fleet served.
        capture = Capture(root / "capture", share=CAPTURE_SHARE, seed=seed)
        traffic = TrafficGenerator(
            splitters["production"].url,
            concurrency=agents,
            gateway=production.gateway,
            time_scale=time_scale,
            seed=seed,
            capture=capture,
        ).start()
        stack.callback(traffic.stop)
    return {"fleets": fleets, "splitters": splitters, "agents": agents}


def _write_dir(
    root: Path, sources: dict[str, Path], originals: dict[str, Any], started: dict[str, Any]
) -> dict[str, Any]:
    """Write the artefacts and the plan copies; returns what the fleet prints."""
    from rolloutd.sim.fleetdir import (
        FleetDirError,
        engine_config_file,
        model_dir,
        pointed_at_fleet,
        write_artefacts,
        write_plan,
    )

    fleets: dict[str, Fleet] = started["fleets"]
    urls = {name: url for one in fleets.values() for name, url in one.urls().items()}
    absolute = root.resolve()
    (root / ".gitignore").write_text("# written by rolloutctl sim fleet\n*\n")
    artefacts = write_artefacts(root)
    (root / "plans").mkdir(exist_ok=True)
    plans = {}
    for env, original in originals.items():
        suffix = "" if env == "production" else "-staging"
        try:
            copy = pointed_at_fleet(
                original,
                urls,
                weights=absolute / f"weights{suffix}.json",
                metrics=absolute / f"metrics{suffix}.json",
                source=str(sources[env]),
                capture=absolute / "capture",
            )
        except FleetDirError as exc:
            raise BadInput.one("--plans", "", str(exc)) from None
        plans[env] = root / "plans" / PLANS[env]
        write_plan(plans[env], sources[env], copy)
    replicas = {
        name: {
            "url": replica.url,
            "pool": replica.pool,
            "environment": env,
            "max_seq_len": replica.config.max_seq_len,
        }
        for env, one in fleets.items()
        for name, replica in ((r.name, r) for r in one.replicas())
    }
    splitters = {env: s.url for env, s in started["splitters"].items()}
    env_values = {
        "SIM_DIR": str(absolute),
        "SPLITTER_URL": splitters["production"],
        "STABLE_URL": urls["gpu-a"],
        "CANARY_URL": urls["gpu-d"],
        "STAGING_SPLITTER_URL": splitters["staging"],
        "STAGING_CANARY_URL": urls["stg-b"],
    }
    return {
        "dir": str(absolute),
        "pid": os.getpid(),
        "replicas": replicas,
        "splitters": splitters,
        "agents": started["agents"],
        "artefacts": {
            name: {
                "dir": str(model_dir(root, name)),
                "engine_config": str(engine_config_file(root, name)),
            }
            for name in artefacts
        },
        "plans": {env: str(path) for env, path in plans.items()},
        "env_file": str(root / "fleet.env"),
        "env": env_values,
    }


def _say_fleet(directory: str, data: dict[str, Any]) -> None:
    """The human summary: what runs where, and the next commands."""
    click.echo(f"simulated fleet serving (pid {data['pid']}); files in {directory}/")
    for name, replica in data["replicas"].items():
        click.echo(
            f"  {replica['environment']:<10} {name:<6} {replica['pool']:<6} "
            f"max_seq_len {replica['max_seq_len']:>6}  {replica['url']}"
        )
    traffic = f"{data['agents']} agents" if data["agents"] else "no traffic"
    for env, url in data["splitters"].items():
        click.echo(
            f"  {env:<10} splitter  {url}" + (f"  ({traffic})" if env == "production" else "")
        )
    click.echo("next, in another shell from the same directory:")
    for name, artefact in data["artefacts"].items():
        click.echo(
            f"  rolloutctl artefact pin {name} {artefact['dir']} --engine trtllm "
            f"--engine-config {artefact['engine_config']}"
        )
    click.echo(f"  rolloutctl drill {data['plans']['staging']} --env staging")
    click.echo(f"  rolloutctl start {data['plans']['production']}")
    click.echo("  rolloutd run")


def _read_plan(path: Path, option: str) -> Any:
    """The plan at ``path`` as YAML data.

    :raises BadInput: it cannot be read or is not a YAML mapping.
    """
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput.one(option, "", f"cannot read the reference plan {path}: {exc}") from None
    if not isinstance(data, dict) or "pools" not in data:
        raise BadInput.one(option, "", f"{path} is not a rollout plan")
    return data


@contextmanager
def _listening(option: str, host: str, port: int) -> Iterator[None]:
    """Turn an address that cannot be bound into bad input naming ``option`` (the port), or
    --host when the host is at fault (no such name, not an address of this machine)."""
    import socket

    try:
        yield
    except OSError as exc:
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            option = "--host"
        where = f"{host}:{port}" if port else host
        raise BadInput.one(option, "", f"cannot listen on {where}: {exc.strerror or exc}") from None


def _ready(data: dict[str, Any], output: str, line: str | None) -> None:
    """Say the thing serves: one JSON line for scripts, or ``line``."""
    if output == "json":
        click.echo(json.dumps(data))
    elif line is not None:
        click.echo(line)


def _stop_on_signal() -> threading.Event:
    """An event set by SIGINT or SIGTERM from now on: one that arrives while the simulated
    engines start still stops them in order, and the files that say they serve go too."""
    stop = threading.Event()
    handler: Callable[[int, Any], None] = lambda signum, frame: stop.set()  # noqa: E731
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def _serve_until(stop: threading.Event) -> None:
    """Block until ``stop`` is set."""
    while not stop.wait(1.0):
        pass
