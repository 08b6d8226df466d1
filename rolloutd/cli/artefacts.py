"""rolloutctl's pinned-artefact commands (``artefact pin/show/list/verify``) and ``drill``.

Kept apart from ``ctl`` so that module stays small; like it, this one imports only click
at start-up: hashing, the database and the executors are imported inside each command.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from rolloutd.cli.common import OUTPUT, TEXT, database, emit, operator_name
from rolloutd.errors import BadInput, Refused

if TYPE_CHECKING:
    from rolloutd.deploy.artefacts import PinnedSet, Progress
    from rolloutd.deploy.drills import DrillStep

VERIFY_FAILED = 1
# Below this, hashing takes well under a second and a bar would only flicker.
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


@contextmanager
def _progress(total: int, label: str) -> Iterator[Progress | None]:
    """A byte progress bar on stderr when it is a terminal and the work is large."""
    if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _now() -> datetime:
    return datetime.now(UTC)


@click.group("artefact")
def artefact_group() -> None:
    """Pin, show and verify engine artefact sets (config + files with sha256 digests).

    \b
    Examples:
      rolloutctl artefact pin atlas-70b-fp8-msl8192 /srv/models/atlas-70b/3 \\
          --engine trtllm --engine-config engine-msl8192.yaml
      rolloutctl artefact list
      rolloutctl artefact verify atlas-70b-fp8-msl32768
    """


@artefact_group.command("pin")
@click.argument("name", type=TEXT)
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--engine", type=click.Choice(["trtllm", "vllm"]), required=True)
@click.option(
    "--engine-config",
    "engine_config",
    required=True,
    type=click.Path(dir_okay=True),
    help="YAML or JSON mapping of engine parameters (max_seq_len, kv_cache_dtype, ...).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Files hashed in parallel (default: CPUs, at most 8).",
)
@OUTPUT
def pin(
    name: str, directory: str, engine: str, engine_config: str, workers: int | None, output: str
) -> None:
    """Hash every file under DIR and pin it as artefact set NAME, with its engine config.

    A set is immutable: pinning NAME again with the same content does nothing; with other
    content it is refused (exit 3). Paths are stored relative to DIR; a symlink is hashed
    as the file it points to.

    \b
    Example:
      rolloutctl artefact pin atlas-70b-fp8-msl32768 /srv/models/atlas-70b/1 \\
          --engine trtllm --engine-config engine-msl32768.yaml
    """
    from rolloutd.deploy.artefacts import list_files
    from rolloutd.deploy.catalog import build_set, check_name, pin, read_engine_config
    from rolloutd.userfiles import refusing_deep_nesting

    check_name(name)
    with refusing_deep_nesting(engine_config):
        config = read_engine_config(engine_config)
    total = sum(path.stat().st_size for path in list_files(directory).values())
    with _progress(total, f"hashing {name}") as progress:
        pinned = build_set(
            name,
            directory,
            engine,
            config,
            created_by=operator_name(),
            workers=workers,
            progress=progress,
        )
    with database() as session:
        created = pin(session, pinned, now=_now())
    data = {**_summary(pinned), "created": created}
    emit(
        data,
        output,
        lambda d: click.echo(
            f"{'pinned' if d['created'] else 'already pinned, identical:'} {d['name']} "
            f"({d['files']} files, {_size(d['bytes'])}, digest {d['digest']})"
        ),
    )


@artefact_group.command("show")
@click.argument("name", type=TEXT)
@OUTPUT
def show(name: str, output: str) -> None:
    """Show artefact set NAME: engine, config, root, digest and every file.

    \b
    Example:
      rolloutctl artefact show atlas-70b-fp8-msl8192 --output json
    """
    from rolloutd.deploy.catalog import get_set

    with database() as session:
        pinned = get_set(session, name)
    data = pinned.manifest() | {"created_by": pinned.created_by}

    def human(d: dict[str, Any]) -> None:
        click.echo(f"name:    {d['name']}")
        click.echo(f"engine:  {d['engine']}")
        click.echo(f"root:    {d['root']}")
        click.echo(f"digest:  {d['digest']}")
        click.echo("config:")
        for key, value in sorted(d["engine_config"].items()):
            click.echo(f"  {key}: {value}")
        click.echo(f"files ({len(d['files'])}):")
        for f in d["files"]:
            click.echo(f"  {f['sha256'][:16]}  {_size(f['size']):>10}  {f['path']}")

    emit(data, output, human)


@artefact_group.command("list")
@OUTPUT
def list_(output: str) -> None:
    """List pinned artefact sets, newest first.

    \b
    Example:
      rolloutctl artefact list --output json
    """
    from rolloutd.deploy.catalog import list_sets

    with database() as session:
        rows = list_sets(session)
    data = [_summary(pinned) | {"created_at": at.isoformat()} for pinned, at in rows]

    def human(d: list[dict[str, Any]]) -> None:
        click.echo(f"{'NAME':<32} {'ENGINE':<7} {'FILES':>5} {'SIZE':>10}  {'DIGEST':<12}  PINNED")
        for row in d:
            click.echo(
                f"{row['name']:<32} {row['engine']:<7} {row['files']:>5} "
                f"{_size(row['bytes']):>10}  {row['digest'][:12]}  {row['created_at'][:19]}"
            )

    emit(data, output, human)


@artefact_group.command("verify")
@click.argument("name", type=TEXT)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Check this directory instead of the root the set was pinned from.",
)
@click.option("--workers", type=click.IntRange(1, 64), default=None)
@OUTPUT
def verify(name: str, directory: str | None, workers: int | None, output: str) -> None:
    """Hash the files of artefact set NAME again and compare them with the pinned digests.

    Exit 0 when every file matches, 1 when a file is missing, changed or not in the set.

    \b
    Examples:
      rolloutctl artefact verify atlas-70b-fp8-msl32768
      rolloutctl artefact verify atlas-70b-fp8-msl32768 --dir /mnt/gpu-d/models/atlas-70b/1
    """
    from rolloutd.deploy.artefacts import verify_directory
    from rolloutd.deploy.catalog import get_set

    with database() as session:
        pinned = get_set(session, name)
    root = directory or pinned.root
    with _progress(pinned.total_bytes, f"verifying {name}") as progress:
        mismatches = verify_directory(pinned, root, workers=workers, progress=progress)
    data = {
        "name": pinned.name,
        "digest": pinned.digest,
        "root": root,
        "ok": not mismatches,
        "mismatches": [
            {"path": m.path, "problem": m.problem, "expected": m.expected, "found": m.found}
            for m in mismatches
        ],
    }

    def human(d: dict[str, Any]) -> None:
        if d["ok"]:
            click.echo(f"{name}: ok ({len(pinned.files)} files match under {root})")
        for m in mismatches:
            click.echo(f"{name}: {m}")

    emit(data, output, human)
    if mismatches:
        sys.exit(VERIFY_FAILED)


@click.command("drill")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=True))
@click.option(
    "--env",
    "environment",
    type=click.Choice(["staging"]),
    required=True,
    help="Where the drill runs; must be the plan's environment. Only staging drills count.",
)
@OUTPUT
def drill_command(plan_file: str, environment: str, output: str) -> None:
    """Exercise the deploy and rollback path of PLAN's artefact sets in staging.

    Deploys the canary set to every canary replica and verifies health and digests, then
    redeploys the stable set (the rollback) and verifies again, with the plan's executor.
    The result is recorded by the digests of both sets: a production rollout of the same
    pair starts only after a passed drill. Exit 0 when the drill passed, 1 when it failed.

    \b
    Example:
      rolloutctl drill config/plans/atlas-70b-staging.yaml --env staging
    """
    from rolloutd.alerts.enqueue import enqueue_plan_alert
    from rolloutd.core.actors import acting
    from rolloutd.deploy.catalog import file_problems, get_set
    from rolloutd.deploy.drills import finish_drill, run_drill, start_drill
    from rolloutd.deploy.executors import build_executor
    from rolloutd.planfile import load_plan
    from rolloutd.store.roles import current_role

    loaded = load_plan(plan_file)
    plan = loaded.plan
    if plan.environment != environment:
        raise BadInput.one(
            plan_file,
            "environment",
            f"is {plan.environment!r}, but the drill was asked to run in {environment!r}",
        )
    if plan.executor.kind == "none":
        raise BadInput.one(
            plan_file, "executor", "a drill needs an executor (kind: command, triton or systemd)"
        )
    executor = build_executor(plan, plan_file)
    with database() as session:
        stable = get_set(session, plan.artefacts.stable)
        canary = get_set(session, plan.artefacts.canary)
    # Hashed outside the transaction: a 70B model's files take minutes.
    problems = file_problems([("stable", stable), ("canary", canary)])
    if problems:
        raise Refused("; ".join(problems))
    with database() as session:
        actor = acting(operator_name(), current_role(session))
        drill_id = start_drill(session, plan, stable, canary, actor=actor, now=_now())
    say = (lambda step: None) if output == "json" else _say_step
    outcome = run_drill(plan, stable, canary, executor, on_step=say)
    with database() as session:
        finish_drill(session, drill_id, outcome, executor=executor.kind, now=_now())
        verdict = "passed" if outcome.passed else "FAILED"
        enqueue_plan_alert(
            session,
            plan,
            key=f"drill-{drill_id}",
            topic="drill_result",
            severity="info" if outcome.passed else "warning",
            text=f"Staging drill {drill_id} of {plan.name} {verdict} "
            f"({stable.name} -> {canary.name}): {outcome.reason}",
            now=_now(),
        )
    data = {
        "drill": drill_id,
        "plan": plan.name,
        "environment": environment,
        "stable": _pair_side(stable),
        "canary": _pair_side(canary),
        **outcome.as_dict(),
    }
    emit(
        data,
        output,
        lambda d: click.echo(
            f"drill {d['drill']} {'passed' if d['passed'] else 'FAILED'} in "
            f"{d['duration_s']:.1f} s: {d['reason']}"
        ),
    )
    if not outcome.passed:
        sys.exit(VERIFY_FAILED)


def _say_step(step: DrillStep) -> None:
    mark = "ok  " if step.ok else "FAIL"
    click.echo(
        f"{mark} {step.phase:<8} {step.action:<6} {step.replica:<16} {step.set_name:<28} "
        f"{step.duration_s:6.1f} s  {step.reason}",
        err=True,
    )


def _summary(pinned: PinnedSet) -> dict[str, Any]:
    return {
        "name": pinned.name,
        "engine": pinned.engine,
        "digest": pinned.digest,
        "root": pinned.root,
        "files": len(pinned.files),
        "bytes": pinned.total_bytes,
    }


def _pair_side(pinned: PinnedSet) -> dict[str, str]:
    return {"name": pinned.name, "digest": pinned.digest}


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
