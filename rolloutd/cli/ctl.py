"""rolloutctl: the operator's command line. Its output is a contract that other tools parse.

It never talks to the daemon: every command reads or writes Postgres (or SQLite), and a
command such as ``promote`` is a row the leader acts on. It must start fast, so it imports
nothing that only the daemon needs (alembic, apscheduler, httpx, the Prometheus client);
``status`` and ``list`` read with Core statements, without the ORM, and draw with rich only
for a table. ``bench/cli_start.py`` measures their start against a bare import of SQLAlchemy.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rolloutd.cli.common import (
    OUTPUT,
    ROW_ID,
    TEXT,
    FiniteFloatRange,
    StorablePath,
    database,
    emit,
    operator_name,
    reading,
)
from rolloutd.cli.errors import BAD_INPUT, REFUSED, run_cli
from rolloutd.core import capacity as kv
from rolloutd.errors import BadInput, Problem

if TYPE_CHECKING:
    from rolloutd.core.actions import CommandKind


def _now() -> datetime:
    return datetime.now(UTC)


# Every option's help shows its default; subcommands inherit these settings.
@click.group(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        "show_default": True,
    }
)
@click.version_option(package_name="rolloutd", prog_name="rolloutctl")
def cli() -> None:
    """Drive progressive rollouts of LLM inference engines.

    \b
    Exit codes: 0 ok, 1 runtime failure (database unreachable), 2 bad input,
    3 refused in the current state or a check failed (plan check, eval). The database
    comes from ROLLOUTD_DATABASE_URL
    (default sqlite:///rolloutd.db) or /etc/rolloutd/rolloutd.env.

    \b
    Examples:
      rolloutctl plan validate config/plans/atlas-70b-maxseq8192.yaml
      rolloutctl start config/plans/atlas-70b-maxseq8192.yaml
      rolloutctl status 7 --output json
      rolloutctl promote 7 --reason "25% looked clean for 48h"
    """


@cli.group()
def plan() -> None:
    """Work with rollout plans."""


@plan.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@OUTPUT
def plan_validate(files: tuple[str, ...], output: str) -> None:
    """Check plan FILES: prints 'FILE: ok' or one line per problem (exit 2).

    Warnings (legal but probably wrong, such as a target concurrency the canary pool
    cannot hold at max_seq_len, or a compare gate whose steps are too short to see the
    regression its 'detect' names at the plan's 'traffic') are printed as
    'FILE: warning: ...' and do not fail.
    With --output json, prints a list with one object per file: file, ok, problems and
    warnings (each a list of source, field and message; source is the file or a file it
    names, such as its metrics templates).

    \b
    Examples:
      rolloutctl plan validate config/plans/*.yaml
      rolloutctl plan validate plans/*.yaml -o json | jq -r '.[] | select(.ok | not) | .file'
    """
    from rolloutd.planfile import load_plan

    results = []
    for path in files:
        problems: tuple[Problem, ...] = ()
        warnings: tuple[Problem, ...] = ()
        try:
            warnings = load_plan(path).warnings
        except BadInput as exc:
            problems = exc.problems
        results.append(
            {
                "file": path,
                "ok": not problems,
                "problems": [_problem_dict(p) for p in problems],
                "warnings": [_problem_dict(w) for w in warnings],
            }
        )
    emit(results, output, _print_validation)
    if any(not result["ok"] for result in results):
        sys.exit(BAD_INPUT)


def _problem_dict(problem: Problem) -> dict[str, str]:
    return {"source": problem.source, "field": problem.field, "message": problem.message}


def _print_validation(results: list[dict[str, Any]]) -> None:
    for result in results:
        for problem in result["problems"]:
            click.echo(str(Problem(**problem)))
        for warning in result["warnings"]:
            click.echo(f"{warning['source']}: warning: {warning['field']}: {warning['message']}")
        if result["ok"]:
            click.echo(f"{result['file']}: ok")


@plan.command("check")
@click.argument("file", type=click.Path(dir_okay=True))
@OUTPUT
def plan_check(file: str, output: str) -> None:
    """Ask the plan's Prometheus for every gate's signal on both pools, now, and count
    the usable cases each live-traffic suite gate's capture holds.

    Prints a row per gate, signal and pool: ok (with the value and samples), no data yet
    (the series exist but there is no traffic or no fresh sample: it may come), or absent
    (a series the signal needs does not exist: the gate can never be judged on these
    engines; the reason names the series and the label). Exit 3 when a gate judged from
    the first tick (the first step's gates, the rollback triggers) is absent: `start`
    refuses such a plan unless given --force --reason.

    \b
    Examples:
      rolloutctl plan check config/plans/atlas-70b-maxseq8192.yaml
      rolloutctl plan check plan.yaml -o json | jq '.[] | select(.found == "absent")'
    """
    from rolloutd.evaluation.sampling import check_captures
    from rolloutd.metrics.preflight import blocking
    from rolloutd.planfile import load_plan

    loaded = load_plan(file)
    checks = _preflight(loaded.plan, file)
    captures = check_captures(loaded.plan, _now())
    if checks is None and not captures:
        click.echo(f"{file}: metrics source {loaded.plan.metrics.source!r}: nothing to check")
        return
    checks = [*(checks or []), *captures]
    from rolloutd.cli import render

    rows = [c.as_dict() for c in checks]
    emit(rows, output, render.plan_checks)
    if blocking(checks):
        sys.exit(REFUSED)


def _preflight(plan: Any, file: str) -> list[Any] | None:
    """The preflight checks of ``plan`` against its Prometheus (None: not a Prometheus plan).

    :raises BadInput: the plan's templates cannot serve it.
    """
    if plan.metrics.source != "prometheus":
        return None
    from rolloutd.drivers import PlanDrivers
    from rolloutd.errors import PermanentError
    from rolloutd.metrics.preflight import check_plan

    try:
        source = PlanDrivers().metrics(0, plan)
    except PermanentError as exc:
        raise BadInput.one(file, "metrics", str(exc)) from None
    return check_plan(plan, source, _now())


@cli.command()
@click.argument("file", type=StorablePath(dir_okay=True))
@click.option(
    "--skip-drill",
    is_flag=True,
    help="Start a production rollout without a passed staging drill (audited and alerted).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Start although a first-step gate's signal is absent (audited).",
)
@click.option(
    "--reason",
    "-r",
    type=TEXT,
    help="Why the drill is skipped or the preflight overridden; required then.",
)
@OUTPUT
def start(file: str, skip_drill: bool, force: bool, reason: str | None, output: str) -> None:
    """Start a rollout of the plan in FILE and print its id.

    Refused (exit 3) while another rollout of the same service and environment is active,
    when an artefact set of the plan is not pinned or its files (where this host can read
    them) no longer match their digests, and, in production, without a passed staging
    drill of the same artefact pair (see `rolloutctl drill`), and when a gate judged from
    the first tick reads a signal that does not exist on the plan's Prometheus (see
    `rolloutctl plan check`) unless --force --reason.

    \b
    Examples:
      rolloutctl start config/plans/atlas-70b-maxseq8192.yaml
      rolloutctl start plan.yaml --skip-drill --reason "hotfix, staging is down (INC-42)"
      rolloutctl start plan.yaml --force --reason "gateway metrics land with this release"
    """
    from rolloutd.alerts.enqueue import enqueue_rollout_alert
    from rolloutd.core.actors import acting
    from rolloutd.deploy.catalog import file_problems, find_set
    from rolloutd.errors import Refused
    from rolloutd.operations import (
        admission_problems,
        record_forced_preflight,
        record_skipped_drill,
        start_rollout,
    )
    from rolloutd.planfile import load_plan
    from rolloutd.store.queries import get_rollout
    from rolloutd.store.roles import current_role

    if (skip_drill or force) and not (reason or "").strip():
        flag = "--skip-drill" if skip_drill else "--force"
        raise BadInput.one("--reason", "", f"required with {flag}: it goes in the audit log")
    if reason and not (skip_drill or force):
        raise BadInput.one("--reason", "", "only means something with --skip-drill or --force")
    loaded = load_plan(file)
    plan = loaded.plan
    forced = _check_before_start(plan, file, force=force)
    with database() as session:
        problems = admission_problems(session, plan, skip_drill=skip_drill)
        pinned = [
            (role, find_set(session, getattr(plan.artefacts, role)))
            for role in ("stable", "canary")
        ]
    # Hashing the files takes a while on a real model: outside any transaction.
    problems += file_problems((role, found) for role, found in pinned if found is not None)
    if problems:
        raise Refused(f"{file}: cannot start: " + "; ".join(problems))
    with database() as session:
        problems = admission_problems(session, plan, skip_drill=skip_drill)
        if problems:  # a set or drill changed meanwhile
            raise Refused(f"{file}: cannot start: " + "; ".join(problems))
        actor = acting(operator_name(), current_role(session))
        rollout_id = start_rollout(session, loaded, actor=actor, now=_now())
        overrides: list[tuple[str, str]] = []
        if skip_drill and reason:
            said = record_skipped_drill(
                session, rollout_id, reason=reason.strip(), actor=actor, now=_now()
            )
            overrides.append(("skip_drill", said))
        if forced and reason:
            said = record_forced_preflight(
                session,
                rollout_id,
                reason=reason.strip(),
                absent=forced,
                actor=actor,
                now=_now(),
            )
            overrides.append(("preflight_forced", said))
        for topic, said in overrides:
            enqueue_rollout_alert(
                session,
                get_rollout(session, rollout_id),
                key=f"alert/{topic}",
                topic=topic,
                severity="warning",
                text=f"Rollout {rollout_id} {said}",
                data={"reason": reason.strip() if reason else ""},
                now=_now(),
            )
    emit(
        {"id": rollout_id, "plan_hash": loaded.content_hash}, output, lambda d: click.echo(d["id"])
    )


def _check_before_start(plan: Any, file: str, *, force: bool) -> list[str]:
    """Refuse a plan whose first-step gates can never be judged, unless forced.

    :returns: what was absent when ``force`` overrode it (for the audit log).
    :raises Refused: a first-step gate's signal is absent and ``force`` is off.
    """
    from rolloutd.core.counts import counted
    from rolloutd.errors import Refused
    from rolloutd.metrics.preflight import blocking

    checks = _preflight(plan, file) or []
    absent = [f"{c.gate} ({c.signal} on {c.pool}): {c.why}" for c in blocking(checks)]
    if absent and not force:
        raise Refused(
            f"{file}: cannot start: these gates are judged from the first tick but can never "
            "be judged on this Prometheus: " + "; ".join(absent) + " (see rolloutctl plan "
            "check; --force --reason to start anyway)"
        )
    # One line a reason: an unreachable Prometheus is one warning, not one a gate and pool.
    unsure: dict[str, list[Any]] = {}
    for check in checks:
        if check.found == "no data yet":
            unsure.setdefault(check.why, []).append(check)
    for why, alike in unsure.items():
        if len(alike) == 1:
            what = f"{alike[0].gate} on {alike[0].pool}"
        else:
            gates = list(dict.fromkeys(c.gate for c in alike))
            of_gates = f"{counted(len(gates), 'gate')} ({', '.join(gates)})"
            what = f"{len(alike)} signal checks of {of_gates}"
        click.echo(f"{file}: warning: {what}: {why}", err=True)
    return absent


@cli.command()
@click.argument("rollout_id", metavar="[ID]", type=ROW_ID, required=False)
@click.option(
    "--watch",
    "-w",
    is_flag=True,
    help="Redraw the view (gates with their trend, last events) until the rollout ends.",
)
@click.option(
    "--interval",
    type=FiniteFloatRange(0.05, 3600),
    default=2.0,
    help="Seconds between redraws with --watch.",
)
@OUTPUT
def status(rollout_id: int | None, watch: bool, interval: float, output: str) -> None:
    """Show a rollout's state, step, weight and gates; without ID, every active rollout.

    With --watch, redraw until the rollout ends (Ctrl-C stops watching, not the rollout);
    with --output json, print one JSON object per redraw.

    \b
    Examples:
      rolloutctl status
      rolloutctl status 7 --watch
      rolloutctl status 7 --output json | jq .state
    """
    from rolloutd.store import reads
    from rolloutd.views import leader_view, status_view

    if watch:
        if rollout_id is None:
            raise BadInput.one("--watch", "", "needs the ID of the rollout to watch")
        _watch(rollout_id, interval, output)
        return

    def table(data: Any) -> None:
        from rolloutd.cli import render  # rich, for a table only

        if rollout_id is not None:
            render.status(data)
        else:
            render.statuses(data)

    with reading() as connection:
        leader = leader_view(connection, now=_now())
        if rollout_id is not None:
            row = reads.get_rollout(connection, rollout_id)
            data: Any = {**status_view(connection, row), "leader": leader}
            emit(data, output, table)
            _say_if_not_leading(leader, driven=[data])
            return
        active = reads.list_rollouts(connection, active_only=True)
        data = [{**status_view(connection, r), "leader": leader} for r in active]
    emit(data, output, table)
    _say_if_not_leading(leader, driven=data)


def _say_if_not_leading(leader: dict[str, Any], *, driven: list[dict[str, Any]]) -> None:
    """Warn (on stderr, so that JSON output stays whole) when rollouts that have not ended
    wait for a rolloutd that is not running."""
    from rolloutd.core.progress import State
    from rolloutd.views import not_leading

    nobody = not_leading(leader)
    if nobody is not None and any(not State(v["state"]).terminal for v in driven):
        click.echo(f"{nobody}: nothing drives these rollouts until one does", err=True)


def _watch(rollout_id: int, interval: float, output: str) -> None:
    import time

    from rolloutd.cli import render
    from rolloutd.store import queries
    from rolloutd.views import leader_view, watch_view

    def frame() -> dict[str, Any]:
        with database() as session:
            view = watch_view(session, queries.get_rollout(session, rollout_id))
            return {**view, "leader": leader_view(session, now=_now())}

    try:
        if output == "json":
            while True:
                view = frame()
                click.echo(json.dumps(view, default=str), nl=True)
                if view["ended"]:
                    return
                time.sleep(interval)
        render.watch_live(frame, interval)
    except KeyboardInterrupt:
        return  # watching stopped; the rollout goes on


@cli.command("list")
@click.option("--limit", type=click.IntRange(1, 10000), default=50)
@OUTPUT
def list_(limit: int, output: str) -> None:
    """List rollouts, newest first.

    \b
    Example:
      rolloutctl list --output json
    """
    from rolloutd.views import leader_view, list_views

    def table(data: Any) -> None:
        from rolloutd.cli import render  # rich, for a table only

        render.rollouts(data)

    with reading() as connection:
        data = list_views(connection, limit=limit)
        leader = leader_view(connection, now=_now())
    emit(data, output, table)
    _say_if_not_leading(leader, driven=data)


@cli.command()
@click.argument("rollout_id", metavar="ID", type=ROW_ID)
@OUTPUT
def history(rollout_id: int, output: str) -> None:
    """Show the audit log of a rollout as a timeline: when, how long after the start, what,
    who, and why.

    \b
    Examples:
      rolloutctl history 7
      rolloutctl history 7 --output json | jq '.[] | select(.kind == "command")'
    """
    from rolloutd.cli import render
    from rolloutd.views import history_view

    with database() as session:
        data = history_view(session, rollout_id)
    emit(data, output, render.history)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (commands, options, choices).

    \b
    Examples:
      rolloutctl completion bash > /etc/bash_completion.d/rolloutctl
      rolloutctl completion zsh > "${fpath[1]}/_rolloutctl"
      rolloutctl completion fish > ~/.config/fish/completions/rolloutctl.fish
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # click ships all three
    click.echo(completer(cli, {}, "rolloutctl", "_ROLLOUTCTL_COMPLETE").source())


def _command(
    kind: CommandKind, rollout_id: int, reason: str | None, output: str, full: bool = False
) -> None:
    from rolloutd.operations import submit_command
    from rolloutd.views import leader_view, not_leading

    with database() as session:
        submitted = submit_command(
            session, rollout_id, kind, actor=operator_name(), reason=reason, full=full, now=_now()
        )
        leader = leader_view(session, now=_now())

    def text(_: Any) -> None:
        what = "queued" if submitted.queued else "already queued"
        click.echo(f"{kind} of rollout {rollout_id} {what} (command {submitted.id})")
        nobody = not_leading(leader)
        if nobody is not None:
            click.echo(f"{nobody}: the command waits until one does")

    data = {
        "rollout": rollout_id,
        "command": submitted.id,
        "kind": kind,
        "full": full,
        "queued": submitted.queued,
        "leader": leader,
    }
    emit(data, output, text)


REASON = click.option("--reason", "-r", type=TEXT, help="Why; kept in the audit log.")


@cli.command()
@click.argument("rollout_id", metavar="ID", type=ROW_ID)
@click.option("--full", is_flag=True, help="Skip every step before 'full' (100%).")
@REASON
@OUTPUT
def promote(rollout_id: int, full: bool, reason: str | None, output: str) -> None:
    """End the current pause or bake of rollout ID (its gates must still pass).

    \b
    Examples:
      rolloutctl promote 7 --reason "25% clean for 48h"
      rolloutctl promote 7 --full --reason "hotfix, gates green"
    """
    _command("promote", rollout_id, reason, output, full=full)


@cli.command()
@click.argument("rollout_id", metavar="ID", type=ROW_ID)
@click.option(
    "--reason", "-r", type=TEXT, required=True, help="Why; required, kept in the audit log."
)
@OUTPUT
def abort(rollout_id: int, reason: str, output: str) -> None:
    """Roll rollout ID back: canary weight 0, stable artefacts on the canary replicas.

    \b
    Example:
      rolloutctl abort 7 --reason "tool args look wrong in support tickets"
    """
    if not reason.strip():
        raise BadInput.one("--reason", "", "must not be empty")
    _command("abort", rollout_id, reason, output)


def _plain_command(kind: CommandKind, doc: str) -> click.Command:
    """The ``kind`` command: rollout ID and an optional reason, nothing else to check."""

    @cli.command(kind, help=doc)
    @click.argument("rollout_id", metavar="ID", type=ROW_ID)
    @REASON
    @OUTPUT
    def command(rollout_id: int, reason: str | None, output: str) -> None:
        _command(kind, rollout_id, reason, output)

    return command


pause = _plain_command(
    "pause",
    """Hold rollout ID at its current weight; its bake clock stops.

    \b
    Example:
      rolloutctl pause 7 --reason "GPU maintenance on gpu-d"
    """,
)
resume = _plain_command(
    "resume",
    """Continue a paused rollout ID; its bake clock runs again.

    \b
    Example:
      rolloutctl resume 7
    """,
)


# A HuggingFace config.json is a few KiB; a tokenizer.json given by mistake is megabytes.
MAX_MODEL_CONFIG_BYTES = 1024 * 1024


@cli.command()
@click.option(
    "--vllm-config",
    type=click.Path(dir_okay=False),
    default=None,
    help="A vLLM server YAML (vllm serve --config): sizes come from it, with --model-config, "
    "--weights-gb and --gpu-memory-gb.",
)
@click.option(
    "--model-config",
    type=click.Path(exists=True, dir_okay=False),
    help="A HuggingFace config.json (layers, KV heads, head dim). Default: the 70B reference.",
)
@click.option(
    "--cuda-graph-gb",
    type=FiniteFloatRange(0, kv.MAX_GB, min_open=True),
    default=None,
    help="With --vllm-config: what CUDA graphs need outside the budget, from the engine's "
    "'Graph capturing finished ... took N GiB' log line plus its context. Default: 3 GiB.",
)
@click.option(
    "--weights-gb",
    type=FiniteFloatRange(0, kv.MAX_GB, min_open=True),
    default=70.0,
    help="Weight bytes of one model copy, in GB.",
)
@click.option("--gpus", type=click.IntRange(1, kv.MAX_GPUS), default=4)
@click.option("--gpu-memory-gb", type=FiniteFloatRange(0, kv.MAX_GB, min_open=True), default=48.0)
@click.option(
    "--tp",
    "tensor_parallel",
    type=click.IntRange(1, kv.MAX_GPUS),
    default=4,
    help="Tensor parallelism (GPUs per model copy).",
)
@click.option(
    "--kv-dtype",
    type=click.Choice(["fp16", "bf16", "fp8", "int8", "fp32"]),
    default="fp16",
)
@click.option(
    "--memory-fraction",
    type=FiniteFloatRange(0, 1, min_open=True),
    default=0.9,
    help="vLLM gpu_memory_utilization / TRT-LLM fraction.",
)
@click.option(
    "--max-seq-len",
    "max_seq_lens",
    type=click.IntRange(1, kv.MAX_COUNT),
    multiple=True,
    default=(32768, 8192),
    help="Repeat to compare several.",
)
@click.option(
    "--target-concurrency",
    type=click.IntRange(1, kv.MAX_COUNT),
    default=None,
    help="Sequences that must be resident at once: prints the max_seq_len that fits.",
)
@OUTPUT
def capacity(
    vllm_config: str | None,
    model_config: str | None,
    cuda_graph_gb: float | None,
    weights_gb: float,
    gpus: int,
    gpu_memory_gb: float,
    tensor_parallel: int,
    kv_dtype: str,
    memory_fraction: float,
    max_seq_lens: tuple[int, ...],
    target_concurrency: int | None,
    output: str,
) -> None:
    """KV-cache arithmetic: resident sequences per max_seq_len, and what fits a target.

    The KV pool of a model copy is its GPUs' memory times --memory-fraction, less the
    weights and a fixed overhead per GPU (activations, CUDA graphs, NCCL buffers); both
    outputs show each part (overhead_bytes_per_gpu in JSON).

    \b
    Examples:
      rolloutctl capacity                                  # 70B FP8 on 4x L40S, 32768 vs 8192
      rolloutctl capacity --target-concurrency 60
      rolloutctl capacity --model-config config.json --weights-gb 16 --gpus 1 --tp 1 \\
          --gpu-memory-gb 80 --max-seq-len 131072 --kv-dtype fp8
      rolloutctl capacity --vllm-config config/vllm/llama-3.1-70b-q4km-l40s.yaml \\
          --model-config config/models/llama-3.1-70b-instruct-config.json --weights-gb 38

    With --vllm-config, the server YAML decides max-model-len, gpu-memory-utilization,
    kv-cache-dtype, tensor-parallel-size, max-num-seqs and max-num-batched-tokens (whose
    activation peak comes out of the budget), and a warning says when the memory left
    outside the budget is too small for CUDA graph capture (an OOM after start).
    """
    if vllm_config is not None:
        from rolloutd.cli.capacity_vllm import show_vllm_capacity

        show_vllm_capacity(
            vllm_config, model_config, weights_gb, gpu_memory_gb, cuda_graph_gb, output
        )
        return
    if cuda_graph_gb is not None:
        raise BadInput.one("--cuda-graph-gb", "", "only means something with --vllm-config")
    from rolloutd.userfiles import read_json_object

    shape = kv.REFERENCE_SHAPE
    if model_config is not None:
        config = read_json_object(
            Path(model_config),
            expected="a HuggingFace config.json",
            what="a model config",
            limit=MAX_MODEL_CONFIG_BYTES,
        )
        try:
            shape = kv.ModelShape.from_hf_config(config)
        except kv.CapacityError as exc:
            raise BadInput.one(model_config, "", str(exc)) from None
    try:
        deployment = kv.Deployment(
            shape=shape,
            weight_bytes=kv.bytes_of_gb(weights_gb, "--weights-gb"),
            gpu_count=gpus,
            gpu_memory_bytes=kv.bytes_of_gb(gpu_memory_gb, "--gpu-memory-gb"),
            tensor_parallel=tensor_parallel,
            kv_dtype_bytes=kv.KV_DTYPE_BYTES[kv_dtype],
            memory_fraction=memory_fraction,
        )
        reports = [kv.plan(deployment, n) for n in max_seq_lens]
        fits = kv.max_seq_len_for(deployment, target_concurrency) if target_concurrency else None
    except kv.CapacityError as exc:
        raise BadInput.one("capacity", "", str(exc)) from None
    data = {
        "model": {
            "layers": shape.num_layers,
            "kv_heads": shape.num_kv_heads,
            "head_dim": shape.head_dim,
        },
        "kv_bytes_per_token": reports[0].kv_bytes_per_token,
        "memory_budget_bytes": reports[0].memory_budget_bytes,
        "weight_bytes": reports[0].weight_bytes,
        "overhead_bytes_per_gpu": reports[0].overhead_bytes_per_gpu,
        "kv_pool_bytes": reports[0].kv_pool_bytes,
        "instances": reports[0].instances,
        "by_max_seq_len": [
            {
                "max_seq_len": r.max_seq_len,
                "sequence_bytes": r.sequence_bytes,
                "resident_sequences": r.resident_sequences,
            }
            for r in reports
        ],
        "target_concurrency": target_concurrency,
        "max_seq_len_for_target": fits,
    }

    def human(d: dict[str, Any]) -> None:
        click.echo(
            f"model: {shape.num_layers} layers, {shape.num_kv_heads} KV heads, head_dim "
            f"{shape.head_dim}; {gpus} GPUs x {gpu_memory_gb:g} GB, TP {tensor_parallel}, "
            f"KV {kv_dtype}, memory fraction {memory_fraction:g}"
        )
        overhead = d["overhead_bytes_per_gpu"]
        click.echo(
            f"memory per copy: {d['memory_budget_bytes'] / kv.GB:.1f} GB budget - "
            f"{d['weight_bytes'] / kv.GB:.1f} GB weights - "
            f"{tensor_parallel * overhead / kv.GB:.1f} GB overhead = "
            f"{d['kv_pool_bytes'] / kv.GB:.1f} GB KV pool"
        )
        click.echo(
            f"overhead per GPU: {overhead / kv.GB:.2f} GB (activations, CUDA graphs, NCCL "
            "buffers), subtracted before the KV pool"
        )
        click.echo(
            f"KV bytes per token: {d['kv_bytes_per_token']:,}   KV pool: "
            f"{d['kv_pool_bytes'] / kv.GB:.1f} GB per copy x {d['instances']}"
        )
        click.echo(f"{'max_seq_len':>12}  {'per sequence':>13}  {'resident sequences':>18}")
        for row in d["by_max_seq_len"]:
            click.echo(
                f"{row['max_seq_len']:>12,}  {row['sequence_bytes'] / kv.GB:>10.2f} GB  "
                f"{row['resident_sequences']:>18}"
            )
        if fits is not None:
            click.echo(f"max_seq_len that keeps {target_concurrency} sequences resident: {fits:,}")

    emit(data, output, human)


@cli.command()
@click.option(
    "--deployment",
    type=click.Choice(["atlas-70b", "support-70b"]),
    default="atlas-70b",
    help="atlas-70b: Triton, 3 stable + 1 canary, tool calls (config/plans/"
    "atlas-70b-maxseq8192.yaml); support-70b: vLLM, 1 + 1 boxes, TTFT at matched load and "
    "faithfulness (config/plans/support-70b-awq.yaml).",
)
@click.option(
    "--scenario",
    type=click.Choice(
        ["happy", "latency", "timeouts", "oom", "schema", "escalation", "unfaithful"]
    ),
    default="oom",
    help="Which fault hits the canary at the 25% step (happy: none). timeouts, schema and "
    "escalation are atlas-70b's; unfaithful is support-70b's.",
)
@click.option(
    "--speed",
    type=FiniteFloatRange(1.0, 1_000_000),
    default=14400.0,
    help="How much faster than real time the rollout runs (14400: a 48 h bake in 12 s).",
)
@click.option("--seed", type=int, default=0, help="Seed of the fleet.")
@OUTPUT
def demo(deployment: str, scenario: str, speed: float, seed: int, output: str) -> None:
    """Run a real rollout against a simulated fleet: breach, rollback, summary.

    Uses SQLite in a new temp dir, kept afterwards with the plan and the rollout's report
    (an HTML page: timeline, router weight, a chart per gate), and starts everything
    in-process: the deployment's simulated replicas (atlas-70b: four Triton replicas, 3
    stable on max_seq_len 32,768 and 1 canary on 8,192; support-70b: two vLLM boxes, one
    a pool), a session-hash splitter fed by the file router, agent traffic, and the real
    daemon on a scaled clock. Exit 0 when the rollout ended as the scenario expects.

    \b
    Examples:
      rolloutctl demo
      rolloutctl demo --scenario happy
      rolloutctl demo --scenario timeouts --output json
      rolloutctl demo --deployment support-70b --scenario unfaithful
    """
    import tempfile
    from pathlib import Path

    from rolloutd.cli.demo_view import LiveView, print_summary
    from rolloutd.demo.deployments import DEPLOYMENTS
    from rolloutd.demo.run import run_demo
    from rolloutd.demo.scenarios import SCENARIOS
    from rolloutd.logs import configure_logging

    chosen, target = SCENARIOS[scenario], DEPLOYMENTS[deployment]
    if deployment not in chosen.deployments:
        fits = ", ".join(name for name, s in SCENARIOS.items() if deployment in s.deployments)
        raise BadInput.one(
            "--scenario", "", f"{scenario!r} is not a scenario of {deployment}: pick one of {fits}"
        )
    configure_logging("critical")
    # Kept afterwards: the database, the plan and the rollout's report, to look at.
    workdir = Path(tempfile.mkdtemp(prefix="rolloutd-demo-"))
    if output == "json":
        result = run_demo(chosen, speed=speed, seed=seed, deployment=target, workdir=workdir)
        click.echo(json.dumps(result.as_json(), indent=2))
    else:
        with LiveView(chosen) as view:
            result = run_demo(
                chosen, speed=speed, seed=seed, deployment=target, observe=view, workdir=workdir
            )
        print_summary(result)
    sys.exit(0 if result.ok else 1)


from rolloutd.cli.artefacts import artefact_group, drill_command  # noqa: E402

cli.add_command(artefact_group)
cli.add_command(drill_command)


from rolloutd.cli.evaluation import eval_command  # noqa: E402

cli.add_command(eval_command)

from rolloutd.cli.report import report_command  # noqa: E402

cli.add_command(report_command)

from rolloutd.cli.sim import sim_group  # noqa: E402

cli.add_command(sim_group)

from rolloutd.cli.sample import suite_group  # noqa: E402

cli.add_command(suite_group)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``rolloutctl`` console script."""
    sys.exit(run_cli(cli, "rolloutctl", argv))


if __name__ == "__main__":
    main()
