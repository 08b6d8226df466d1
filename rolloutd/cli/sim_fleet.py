"""``rolloutctl sim fleet``: a reference deployment served locally, and what a rollout of it needs.

Either reference deployment of the design, with a staging pair, each environment behind a
session splitter that follows the ``file`` router's weights; agent traffic on production.
Into ``DIR`` go the artefact sets to pin, the reference plans pointed at the fleet (see
``rolloutd.sim.fleetdir``), the metrics files a separate ``rolloutd run`` reads, and
``fleet.env`` last. The commands it prints next are the README walkthrough's.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rolloutd.cli.common import OUTPUT
from rolloutd.cli.sim_common import (
    TIME_SCALE,
    listening,
    read_plan,
    ready,
    serve_until,
    stop_on_signal,
)
from rolloutd.errors import BadInput

if TYPE_CHECKING:
    from rolloutd.sim.fleet import Fleet


@dataclass(frozen=True)
class Layout:
    """One reference deployment as the simulated fleet serves it."""

    production: tuple[str, ...]
    """Production's replicas, stable first; the last one is the canary."""
    staging: tuple[str, ...]
    plans: tuple[tuple[str, str, str], ...]
    """(role, file under --plans, environment): the plans copied into DIR/plans."""
    engine: str
    """The engine kind its sets are pinned as (``rolloutctl artefact pin --engine``)."""
    next_starts: tuple[str, ...]
    """The roles of the plans the printed next commands start, in order."""

    @property
    def ports(self) -> int:
        """Ports used: the replicas of both environments and the two splitters."""
        return len(self.production) + len(self.staging) + 2


LAYOUTS: dict[str, Layout] = {
    "atlas-70b": Layout(
        production=("gpu-a", "gpu-b", "gpu-c", "gpu-d"),
        staging=("stg-a", "stg-b"),
        plans=(
            ("production", "atlas-70b-maxseq8192.yaml", "production"),
            ("staging", "atlas-70b-staging.yaml", "staging"),
            ("quick", "atlas-70b-quick.yaml", "production"),
        ),
        engine="trtllm",
        next_starts=("quick", "production"),
    ),
    "support-70b": Layout(
        production=("box-a", "box-b"),
        staging=("stg-a", "stg-b"),
        plans=(
            ("production", "support-70b-awq.yaml", "production"),
            ("staging", "support-70b-staging.yaml", "staging"),
        ),
        engine="vllm",
        next_starts=("production",),
    ),
}
MAX_PORTS = max(layout.ports for layout in LAYOUTS.values())
CAPTURE_SHARE = 0.2
"""The share of tool-calling requests the fleet's gateway captures into DIR/capture."""
RESTART_DELAY_S = 60.0
"""Simulated seconds a vLLM box takes to come back from a restart (0.6 s at the default
time scale): long enough that the executor sees /health fail, short enough to watch."""


@click.command("fleet")
@click.option(
    "--deployment",
    type=click.Choice(list(LAYOUTS)),
    default="atlas-70b",
    help="Which reference deployment: atlas-70b (Triton, gpu-a..gpu-d) or support-70b (vLLM, "
    "box-a and box-b, rolled back by the systemd executor).",
)
@click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False),
    help="Where to write the artefacts, plans, weights and metrics files.",
)
@click.option(
    "--port-base",
    type=click.IntRange(0, 65535 - MAX_PORTS + 1),
    default=0,
    help="The first of consecutive ports for the replicas, the staging pair and the "
    "production and staging splitters: 8 for atlas-70b (gpu-a..gpu-d, stg-a, stg-b, "
    "splitters), 6 for support-70b (box-a, box-b, stg-a, stg-b, splitters); 0: free ports.",
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
    help="Where the reference plans are (config/plans of the clone).",
)
@click.option("--seed", type=int, default=0, help="Seed of the engines and the traffic.")
@TIME_SCALE
@OUTPUT
def fleet_command(
    deployment: str,
    directory: str,
    port_base: int,
    agents: int,
    plans_dir: str,
    seed: int,
    time_scale: float,
    output: str,
) -> None:
    """Serve a reference deployment and a staging pair, and write what a rollout of it needs.

    atlas-70b (the default): gpu-a..gpu-c (stable, max_seq_len 32,768) and gpu-d (canary,
    8,192), simulated Triton; plans atlas-70b-maxseq8192, -staging and -quick. support-70b:
    box-a (stable, Q4_K_M GGUF) and box-b (canary, AWQ), simulated vLLM; plans
    support-70b-awq and -staging, whose systemd executor restarts a box with `rolloutctl sim
    restart`. Production sits behind a session-hash splitter that follows the file router's
    weights, with --agents sessions of agent traffic; the staging pair stg-a, stg-b behind
    its own. In DIR: models/ and engine-*.json (the two artefact sets to pin), plans/ (the
    reference plans with only their replica URLs, router, metrics source and a systemd
    executor's restart and env file pointed here), metrics.json and metrics-staging.json
    (rewritten every 2 s: the file metrics source), capture/ (atlas-70b: a fifth of the
    agents' tool calls, in OpenAI Batch format, for the live-traffic suite gates), and
    fleet.env (the URLs, written last: the fleet is ready). Serves until SIGINT or SIGTERM.

    \b
    Examples:
      rolloutctl sim fleet --dir sim &
      rolloutctl sim fleet --deployment support-70b --dir sim-support &
      rolloutctl sim fleet --dir /tmp/fleet --port-base 18000 --agents 0 -o json
    """
    layout = LAYOUTS[deployment]
    stop = stop_on_signal()
    root = Path(directory)
    sources = {role: Path(plans_dir) / name for role, name, _ in layout.plans}
    originals = {role: read_plan(path, "--plans") for role, path in sources.items()}
    root.mkdir(parents=True, exist_ok=True)
    env_file = root / "fleet.env"
    # A stale one would say "ready" before this fleet is.
    env_file.unlink(missing_ok=True)
    with ExitStack() as stack:
        started = _start_fleet(
            stack, deployment, root.resolve(), port_base, agents, seed, time_scale
        )
        data = _write_dir(deployment, root, sources, originals, started)
        stack.callback(env_file.unlink, missing_ok=True)
        from rolloutd.sim.fleetdir import write_env

        write_env(env_file, data["env"])
        ready(data, output, None)
        if output != "json":
            _say_fleet(directory, data)
        serve_until(stop)


def _fleets(deployment: str, seed: int, time_scale: float) -> dict[str, Fleet]:
    """Production's and staging's simulated replicas, not yet started."""
    from rolloutd.sim.fleet import Fleet, ReplicaSpec

    if deployment == "support-70b":
        from rolloutd.demo.deployments import support_fleet

        return {
            "production": support_fleet(
                seed, time_scale=time_scale, restart_delay_s=RESTART_DELAY_S
            ),
            "staging": support_fleet(
                seed,
                names=("stg-a", "stg-b"),
                time_scale=time_scale,
                restart_delay_s=RESTART_DELAY_S,
            ),
        }
    from rolloutd.sim.config import REFERENCE_CANARY

    return {
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


def _start_fleet(
    stack: ExitStack,
    deployment: str,
    root: Path,
    port_base: int,
    agents: int,
    seed: int,
    time_scale: float,
) -> dict[str, Any]:
    """Start both environments' replicas, splitters, metrics files and the traffic; each
    stops when ``stack`` closes."""
    from rolloutd.demo.splitter import Splitter
    from rolloutd.sim.metricsfile import MetricsFileWriter

    layout = LAYOUTS[deployment]
    names = [*layout.production, *layout.staging, "splitter", "staging-splitter"]
    ports = {name: port_base + i if port_base else 0 for i, name in enumerate(names)}
    fleets = _fleets(deployment, seed, time_scale)
    splitters: dict[str, Any] = {}
    for env, suffix in (("production", ""), ("staging", "-staging")):
        one: Fleet = fleets[env]
        with listening("--port-base", "127.0.0.1", port_base):
            one.start(ports)
        stack.callback(one.stop)
        pools = {pool: list(one.urls(pool).values()) for pool in ("stable", "canary")}
        splitter_port = ports["splitter" if env == "production" else "staging-splitter"]
        with listening("--port-base", "127.0.0.1", port_base):
            splitter = Splitter(root / f"weights{suffix}.json", pools, port=splitter_port).start()
        stack.callback(splitter.stop)
        splitters[env] = splitter
        writer = MetricsFileWriter(one.metrics(), root / f"metrics{suffix}.json", period=2.0)
        stack.callback(writer.stop)
        writer.start()
    if agents:
        stack.callback(
            _traffic(
                deployment, root, fleets["production"], splitters, agents, seed, time_scale
            ).stop
        )
    return {"fleets": fleets, "splitters": splitters, "agents": agents}


def _traffic(
    deployment: str,
    root: Path,
    production: Fleet,
    splitters: dict[str, Any],
    agents: int,
    seed: int,
    time_scale: float,
) -> Any:
    """Start the agents' sessions through the production splitter; returns the generator."""
    from rolloutd.sim.traffic import TrafficGenerator

    if deployment == "support-70b":
        from rolloutd.demo.deployments import SUPPORT_ENGINE, SUPPORT_WORKLOAD

        # Support questions with retrieved context; no gate samples live traffic, so
        # nothing is captured.
        return TrafficGenerator(
            splitters["production"].url,
            concurrency=agents,
            gateway=production.gateway,
            workload=SUPPORT_WORKLOAD,
            model=SUPPORT_ENGINE.model,
            time_scale=time_scale,
            seed=seed,
        ).start()
    from rolloutd.gateway import Capture

    # The gateway captures a fifth of the tool-calling requests, as a deployment's would:
    # the live-traffic suite gates sample what the fleet served.
    return TrafficGenerator(
        splitters["production"].url,
        concurrency=agents,
        gateway=production.gateway,
        time_scale=time_scale,
        seed=seed,
        capture=Capture(root / "capture", share=CAPTURE_SHARE, seed=seed),
    ).start()


def _write_dir(
    deployment: str,
    root: Path,
    sources: dict[str, Path],
    originals: dict[str, Any],
    started: dict[str, Any],
) -> dict[str, Any]:
    """Write the artefacts and the plan copies; returns what the fleet prints."""
    from rolloutd.sim.fleetdir import (
        ENGINE_CONFIGS,
        SUPPORT_ENGINE_ARGS,
        FleetDirError,
        copy_companions,
        engine_config_file,
        model_dir,
        pointed_at_fleet,
        write_artefacts,
        write_plan,
    )

    layout = LAYOUTS[deployment]
    fleets: dict[str, Fleet] = started["fleets"]
    urls = {name: url for one in fleets.values() for name, url in one.urls().items()}
    absolute = root.resolve()
    (root / ".gitignore").write_text("# written by rolloutctl sim fleet\n*\n")
    sets = SUPPORT_ENGINE_ARGS if layout.engine == "vllm" else ENGINE_CONFIGS
    artefacts = write_artefacts(root, sets, layout.engine)
    (root / "plans").mkdir(exist_ok=True)
    (root / "vllm").mkdir(exist_ok=True)
    plans = {}
    for role, name, env in layout.plans:
        suffix = "" if env == "production" else "-staging"
        plans[role] = root / "plans" / name
        try:
            copy = pointed_at_fleet(
                originals[role],
                urls,
                weights=absolute / f"weights{suffix}.json",
                metrics=absolute / f"metrics{suffix}.json",
                source=str(sources[role]),
                capture=absolute / "capture",
                restart=_restart_argv(absolute),
                env_file=absolute / "vllm" / "{replica}.env",
            )
            copy_companions(originals[role], sources[role], plans[role], root)
        except FleetDirError as exc:
            raise BadInput.one("--plans", "", str(exc)) from None
        write_plan(plans[role], sources[role], copy)
    replicas = {
        replica.name: {
            "url": replica.url,
            "pool": replica.pool,
            "environment": env,
            "engine": replica.flavor,
            "max_seq_len": replica.config.max_seq_len,
        }
        for env, one in fleets.items()
        for replica in one.replicas()
    }
    splitters = {env: s.url for env, s in started["splitters"].items()}
    stable, canary = layout.production[0], layout.production[-1]
    env_values = {
        "SIM_DIR": str(absolute),
        "SPLITTER_URL": splitters["production"],
        "STABLE_URL": urls[stable],
        "CANARY_URL": urls[canary],
        "STAGING_SPLITTER_URL": splitters["staging"],
        "STAGING_CANARY_URL": urls[layout.staging[-1]],
    }
    pinned = {
        name: {
            "dir": str(model_dir(root, name)),
            "engine_config": str(engine_config_file(root, name)),
        }
        for name in artefacts
    }
    return {
        "deployment": deployment,
        "dir": str(absolute),
        "pid": os.getpid(),
        "replicas": replicas,
        "splitters": splitters,
        "agents": started["agents"],
        "artefacts": pinned,
        "plans": {role: str(path) for role, path in plans.items()},
        "next": next_commands(layout, pinned, plans),
        "env_file": str(root / "fleet.env"),
        "env": env_values,
    }


def _restart_argv(root: Path) -> list[str]:
    """A systemd executor's restart on the simulated fleet: ``rolloutctl sim restart`` of
    the replica on the environment file the executor wrote (``{url}`` and ``{replica}`` are
    the executor's placeholders)."""
    env_file = str(root / "vllm" / "{replica}.env")
    return ["rolloutctl", "sim", "restart", "--url", "{url}", "--env-file", env_file]


def next_commands(
    layout: Layout, artefacts: dict[str, dict[str, str]], plans: dict[str, Path]
) -> list[str]:
    """What an operator runs next, in order: pin both sets, drill staging, start the
    plans, run the daemon (the README walkthrough's commands)."""
    commands = [
        f"rolloutctl artefact pin {name} {artefact['dir']} --engine {layout.engine} "
        f"--engine-config {artefact['engine_config']}"
        for name, artefact in artefacts.items()
    ]
    commands.append(f"rolloutctl drill {plans['staging']} --env staging")
    first, *rest = layout.next_starts
    commands += [f"rolloutctl start {plans[first]}", "rolloutd run"]
    commands += [f"rolloutctl start {plans[role]}" for role in rest]
    return commands


def _say_fleet(directory: str, data: dict[str, Any]) -> None:
    """The human summary: what runs where, and the next commands."""
    click.echo(
        f"simulated {data['deployment']} fleet serving (pid {data['pid']}); files in {directory}/"
    )
    for name, replica in data["replicas"].items():
        click.echo(
            f"  {replica['environment']:<10} {name:<6} {replica['pool']:<6} "
            f"{replica['engine']:<6} max_seq_len {replica['max_seq_len']:>6}  {replica['url']}"
        )
    traffic = f"{data['agents']} agents" if data["agents"] else "no traffic"
    for env, url in data["splitters"].items():
        click.echo(
            f"  {env:<10} splitter  {url}" + (f"  ({traffic})" if env == "production" else "")
        )
    click.echo("next, in another shell from the same directory:")
    for command in data["next"]:
        click.echo(f"  {command}")
