"""rolloutctl end to end: exit codes, JSON contracts, refusals and clean error messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from sqlalchemy import select

from rolloutd.core.progress import Progress
from rolloutd.operations import start_rollout
from rolloutd.planfile import parse_plan
from rolloutd.store import queries
from rolloutd.store.models import Action
from rolloutd.store.outbox_models import OutboxMessage
from rolloutd.store.roles import current_role
from tests.cli import Ctl, imported_by
from tests.deploy.helpers import pin_and_drill
from tests.plans import example_plan

if TYPE_CHECKING:
    from conftest import StoreHandle

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "plans" / "atlas-70b-maxseq8192.yaml"


@pytest.fixture
def ctl(bare_ctl: Ctl, store: StoreHandle, tmp_path: Path) -> Ctl:
    """rolloutctl on a database where the example plan may start: its artefact sets are
    pinned and a staging drill of the pair passed."""
    with store.sessions.begin() as session:
        pin_and_drill(session, example_plan(), tmp_path / "artefacts")
    return bare_ctl


def _set_progress(store: StoreHandle, rollout_id: int, progress: Progress, state: str) -> None:
    """Move a rollout as the daemon would, so that commands meet a given state."""
    with store.sessions.begin() as session:
        rollout = queries.get_rollout(session, rollout_id)
        terminal = state in ("completed", "rolled_back", "aborted", "failed")
        queries.save_progress(
            session,
            rollout,
            progress=progress.for_storage(),
            state=state,
            active=not terminal,
            now=datetime.now(UTC),
        )


def test_validate_prints_ok_for_the_example_plan(ctl: Ctl) -> None:
    """`plan validate` on the worked example prints 'FILE: ok' and exits 0."""
    code, out, _ = ctl("plan", "validate", str(EXAMPLE))
    assert (code, out.strip()) == (0, f"{EXAMPLE}: ok")


SUPPORT = EXAMPLE.parent / "support-70b-awq.yaml"


def test_the_second_reference_plan_validates_with_its_capacity_warnings(ctl: Ctl) -> None:
    """support-70b-awq: ok, with the two warnings its server YAML earns (one full 8,192-token
    sequence in the KV pool at 0.92 on one L40S), and the gates the deployment needs: TTFT
    p95 at matched load, faithfulness judged on the reference suite, the systemd rollback."""
    from rolloutd.core.plan import LatencyGate, SuiteGate, SystemdExecutor
    from rolloutd.planfile import load_plan

    code, out, err = ctl("plan", "validate", str(SUPPORT))
    assert (code, out.strip().splitlines()[-1]) == (0, f"{SUPPORT}: ok"), err
    warnings = out + err
    assert "only 1 of max-model-len 8,192 fit the KV pool" in warnings
    assert "need 4 sequences at once" in warnings
    plan = load_plan(SUPPORT).plan
    ttft = plan.gates["ttft_p95"]
    assert isinstance(ttft, LatencyGate) and ttft.match_load is not None
    assert ttft.target_seconds == 1.0
    faithfulness = plan.gates["faithfulness"]
    assert isinstance(faithfulness, SuiteGate) and faithfulness.scorer == "judge"
    assert faithfulness.judge is not None and faithfulness.judge.api_key_env
    assert isinstance(plan.executor, SystemdExecutor)
    assert (len(plan.pools.stable.replicas), len(plan.pools.canary.replicas)) == (1, 1)


def test_validate_prints_one_line_per_problem_and_exits_2(ctl: Ctl, tmp_path: Path) -> None:
    """Each problem of a bad plan is one line naming file and field; the exit code is 2."""
    bad = tmp_path / "bad.yaml"
    text = (
        EXAMPLE.read_text()
        .replace("weight: 25", "weight: 150")
        .replace("bake: 48h\n", "bake: x\n", 1)
    )
    bad.write_text(text)
    code, out, _ = ctl("plan", "validate", str(EXAMPLE), str(bad))
    lines = out.strip().splitlines()
    assert code == 2
    assert lines[0] == f"{EXAMPLE}: ok"
    assert f"{bad}: steps[2].bake: expected a duration" in lines[1]
    assert lines[2].startswith(f"{bad}: steps[3].weight: ")
    assert len(lines) == 3


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "is empty"),
        (b"- a\n- b\n", "expected a YAML mapping"),
        (b"\x00\x01\x02", "binary"),
        (b"name: [unclosed\n", "not valid YAML at line"),
    ],
)
def test_start_rejects_bad_files_with_exit_2_and_writes_nothing(
    ctl: Ctl, tmp_path: Path, content: bytes, expected: str
) -> None:
    """`start` on a bad plan exits 2 with the reason and creates no rollout."""
    path = tmp_path / "plan.yaml"
    path.write_bytes(content)
    code, _, err = ctl("start", str(path))
    assert code == 2
    assert expected in err
    assert ctl.json("list") == []


def test_start_prints_the_id_and_status_reports_the_contract_keys(ctl: Ctl) -> None:
    """`start` prints the new id; `status --output json` has the keys later tools rely on."""
    code, out, _ = ctl("start", str(EXAMPLE))
    assert code == 0
    rollout_id = int(out.strip())
    status = ctl.json("status", str(rollout_id))
    for key in ("id", "name", "service", "environment", "state", "step", "step_name", "weight"):
        assert key in status
    assert status["id"] == rollout_id
    assert (status["state"], status["weight"], status["step_name"]) == ("pending", 0, "shadow")
    assert isinstance(status["weight"], int)
    assert status["updated_at"]
    gate = status["gates"][0]
    assert set(gate) >= {"name", "verdict", "value", "threshold", "evaluated_at"}
    assert {g["name"] for g in status["gates"]} >= {"canary_oom", "tool_args_no_regression"}


def test_start_warns_once_for_a_prometheus_it_cannot_reach(ctl: Ctl, tmp_path: Path) -> None:
    """Every gate's signals are checked before a start; when Prometheus cannot be reached
    they all fail alike, and the operator reads that once (with what it covers), not once a
    gate and pool. The start goes ahead: the daemon may reach what this host cannot."""
    plan = tmp_path / "unreachable.yaml"
    plan.write_text(
        EXAMPLE.read_text().replace("http://prometheus.ops.internal:9090", "http://127.0.0.1:9")
    )
    code, out, err = ctl("start", str(plan))
    assert code == 0 and int(out)
    warnings = [line for line in err.splitlines() if ": warning: " in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"{plan}: warning: 18 signal checks of 8 gates (")
    assert "canary_oom" in warnings[0]
    assert warnings[0].endswith(
        "cannot connect to Prometheus at http://127.0.0.1:9: connection refused"
    )


def test_start_is_refused_while_the_service_has_an_active_rollout(ctl: Ctl, tmp_path: Path) -> None:
    """A second rollout of the same service and environment is refused with exit 3."""
    assert ctl("start", str(EXAMPLE))[0] == 0
    code, _, err = ctl("start", str(EXAMPLE))
    assert code == 3
    assert "refused" in err and "atlas-70b/production" in err
    staging = tmp_path / "staging.yaml"
    staging.write_text(
        EXAMPLE.read_text().replace("environment: production", "environment: staging")
    )
    assert ctl("start", str(staging))[0] == 0


def test_commands_are_written_with_actor_and_reason(
    ctl: Ctl, store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """abort writes a command row with the operator's name and reason, and an audit event;
    on Postgres the history names the database role beside the claimed name."""
    monkeypatch.setenv("SUDO_USER", "alice")
    rollout_id = ctl.json("start", str(EXAMPLE))["id"]
    result = ctl.json("abort", str(rollout_id), "--reason", "tool args wrong")
    with store.sessions() as session:
        (command,) = queries.pending_commands(session, rollout_id)
        role = current_role(session)
    assert (command.id, command.kind, command.actor) == (result["command"], "abort", "alice")
    assert command.reason == "tool args wrong" and command.db_role == role
    shown = "alice" if role is None else f"alice (as db role {role})"
    history = ctl.json("history", str(rollout_id))
    assert [(e["kind"], e["actor"]) for e in history] == [
        ("created", shown),
        ("command", shown),
    ]
    assert "tool args wrong" in history[-1]["detail"]


def test_abort_requires_a_reason(ctl: Ctl) -> None:
    """abort without --reason (or with an empty one) is bad input, exit 2."""
    rollout_id = ctl.json("start", str(EXAMPLE))["id"]
    assert ctl("abort", str(rollout_id))[0] == 2
    assert ctl("abort", str(rollout_id), "--reason", "  ")[0] == 2
    assert ctl.json("history", str(rollout_id))[-1]["kind"] == "created"


def _started(**facts: Any) -> Progress:
    """Progress of a rollout started on 1 January 2026, with ``facts`` besides."""
    return Progress(started_at=datetime(2026, 1, 1, tzinfo=UTC), **facts)


@pytest.mark.parametrize(
    ("state", "progress", "command", "allowed"),
    [
        ("pending", Progress(), ["promote"], False),
        ("pending", Progress(), ["pause"], False),
        ("pending", Progress(), ["abort", "--reason", "x"], True),
        ("running", _started(), ["pause"], True),
        ("running", _started(), ["resume"], False),
        ("running", _started(), ["promote", "--full"], True),
        ("paused", _started(paused="operator"), ["promote"], False),
        ("paused", _started(paused="operator"), ["resume"], True),
        ("rolled_back", _started(ended="rolled_back"), ["promote"], False),
        ("completed", _started(ended="completed"), ["abort", "--reason", "x"], False),
    ],
)
def test_commands_that_make_no_sense_are_refused_with_exit_3(
    ctl: Ctl,
    store: StoreHandle,
    state: str,
    progress: Progress,
    command: list[str],
    allowed: bool,
) -> None:
    """Each command is accepted or refused (exit 3, with a reason) according to the state."""
    rollout_id = ctl.json("start", str(EXAMPLE))["id"]
    _set_progress(store, rollout_id, progress, state)
    assert ctl.json("status", str(rollout_id))["state"] == state
    code, _, err = ctl(command[0], str(rollout_id), *command[1:])
    if allowed:
        assert code == 0, err
    else:
        assert code == 3
        assert f"cannot {command[0]} rollout {rollout_id}" in err
        with store.sessions() as session:
            assert queries.pending_commands(session, rollout_id) == []


def test_status_of_an_unknown_rollout_is_bad_input(ctl: Ctl) -> None:
    """Asking about a rollout that does not exist exits 2 and says so."""
    code, _, err = ctl("status", "4242")
    assert code == 2
    assert "no rollout 4242" in err


def test_bad_arguments_exit_2(ctl: Ctl) -> None:
    """A non-numeric id, an unknown option or an unknown output format is bad input (2)."""
    assert ctl("status", "seven")[0] == 2
    assert ctl("list", "--colour")[0] == 2
    assert ctl("list", "--output", "yaml")[0] == 2
    assert ctl("frobnicate")[0] == 2


def test_list_and_status_without_id(ctl: Ctl, store: StoreHandle) -> None:
    """`list` shows every rollout newest first; `status` without an id shows the active ones."""
    first = ctl.json("start", str(EXAMPLE))["id"]
    _set_progress(
        store,
        first,
        Progress(started_at=datetime(2026, 1, 1, tzinfo=UTC), ended="completed"),
        "completed",
    )
    second = ctl.json("start", str(EXAMPLE))["id"]
    assert [r["id"] for r in ctl.json("list")] == [second, first]
    assert [r["id"] for r in ctl.json("status")] == [second]
    code, out, _ = ctl("list")
    assert code == 0 and "atlas-70b-maxseq8192" in out and "completed" in out


def test_list_reads_an_ended_rollout_without_its_plan(
    ctl: Ctl, store: StoreHandle, plan_rebuilds: list[int]
) -> None:
    """An ended rollout whose step the daemon recorded is listed from its progress and that
    record, and one yet to end from the outline stored with it, as their plans would show
    them: no plan is rebuilt."""
    ended = ctl.json("start", str(EXAMPLE))["id"]
    started = datetime(2026, 1, 1, tzinfo=UTC)
    done = Progress(started_at=started, step_index=5, ended="completed", ended_at=started)
    _set_progress(store, ended, done, "completed")
    ctl.json("start", str(EXAMPLE))  # and one yet to end
    from_plans = ctl.json("list")
    plan = example_plan()
    with store.sessions.begin() as session:
        step = plan.steps[5]
        queries.upsert_step(
            session,
            rollout_id=ended,
            step_index=5,
            name=step.title(),
            kind=step.kind,
            weight=float(plan.step_weight(5)),
            entered_at=started,
        )
    assert ctl.json("list") == from_plans
    assert plan_rebuilds == []
    row = from_plans[1]
    assert row["id"] == ended
    assert (row["state"], row["step"], row["steps"], row["step_name"], row["weight"]) == (
        "completed",
        6,
        6,
        "steady",
        100,
    )


def test_human_output_is_readable(ctl: Ctl) -> None:
    """The default output is a table that names the state, step and gates."""
    rollout_id = ctl.json("start", str(EXAMPLE))["id"]
    code, out, _ = ctl("status", str(rollout_id))
    assert code == 0
    assert "pending" in out and "shadow" in out and "canary_oom" in out
    code, out, _ = ctl("history", str(rollout_id))
    assert code == 0 and "created" in out


def test_every_command_has_help_with_an_example(ctl: Ctl) -> None:
    """Each command's --help shows an example invocation."""
    for command in (
        ["start"],
        ["status"],
        ["list"],
        ["history"],
        ["promote"],
        ["abort"],
        ["pause"],
        ["resume"],
        ["plan", "validate"],
    ):
        code, out, _ = ctl(*command, "--help")
        assert code == 0
        assert "Example" in out and "rolloutctl " + " ".join(command) in out


@pytest.mark.parametrize("db_backend", ["sqlite"], indirect=True)
def test_a_database_without_schema_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    db_backend: str,
) -> None:
    """On a database that is not at head, commands refuse and say to run `rolloutd db upgrade`."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", f"sqlite:///{tmp_path}/empty.db")
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    code, _, err = Ctl(capsys)("list")
    assert code == 1
    assert "rolloutd db upgrade" in err


def test_an_unreachable_database_names_the_host_not_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database that cannot be reached exits 1 naming the host; the password never appears."""
    monkeypatch.setenv(
        "ROLLOUTD_DATABASE_URL", "postgresql://ops:hunter2-secret@127.0.0.1:1/rolloutd"
    )
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    code, out, err = Ctl(capsys)("list")
    assert code == 1
    assert "127.0.0.1" in err
    assert "hunter2" not in out + err


def test_settings_come_from_the_env_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ROLLOUTD_ENV_FILE (like /etc/rolloutd/rolloutd.env) supplies the database URL."""
    env_file = tmp_path / "rolloutd.env"
    env_file.write_text(f"ROLLOUTD_DATABASE_URL=sqlite:///{tmp_path}/from-env-file.db\n")
    monkeypatch.delenv("ROLLOUTD_DATABASE_URL", raising=False)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", str(env_file))
    code, _, err = Ctl(capsys)("list")
    assert code == 1
    assert "from-env-file.db" in err


def test_rolloutctl_does_not_import_what_only_the_daemon_needs(store: StoreHandle) -> None:
    """`rolloutctl status` imports no alembic, apscheduler, HTTP or Prometheus client, and
    not the web view's templates."""
    heavy = ("alembic", "apscheduler", "httpx", "aiohttp", "jinja2")
    heavy += ("prometheus_api_client", "prometheus_client")
    assert imported_by(store.url, ["status"], heavy)[:2] == (0, [])


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["status", "{id}"], ["rolloutd.store.models"]),
        (["list"], ["rolloutd.store.models"]),
        (["status", "{id}", "-o", "json"], ["rich"]),
        (["list", "-o", "json"], ["rich"]),
    ],
)
def test_status_and_list_read_without_the_orm_the_plan_or_the_settings(
    store: StoreHandle, argv: list[str], absent: list[str]
) -> None:
    """`status ID` and `list` read with Core statements and show the outline stored with the
    rollout: the ORM, the mapped tables, the plan model, pydantic (plan and settings alike)
    and the YAML parser are never imported, nor, for JSON output, rich."""
    absent = [*absent, "sqlalchemy.orm", "rolloutd.core.plan", "pydantic", "yaml"]
    with store.sessions.begin() as session:
        loaded = parse_plan(EXAMPLE.read_text())
        rollout_id = start_rollout(session, loaded, actor="t", now=datetime.now(UTC))
    args = [a.format(id=rollout_id) for a in argv]
    assert imported_by(store.url, args, tuple(absent))[:2] == (0, [])


# --- admission: pinned artefacts and the staging drill ------------------------------------


def test_a_production_start_without_a_passed_drill_is_refused(
    bare_ctl: Ctl, store: StoreHandle, tmp_path: Path
) -> None:
    """Pinned sets but a failed drill: refused (exit 3) with the pair and the way out."""
    with store.sessions.begin() as session:
        pin_and_drill(session, example_plan(), tmp_path, drill="failed")
    code, _, err = bare_ctl("start", str(EXAMPLE))
    assert code == 3
    assert "no passed staging drill for artefact sets atlas-70b-fp8-msl32768" in err
    assert "did not pass: drill failed" in err and "--skip-drill --reason" in err
    assert bare_ctl.json("list", "-o", "json") == []


def test_skip_drill_starts_and_is_audited_and_alerted(
    bare_ctl: Ctl, store: StoreHandle, tmp_path: Path
) -> None:
    """--skip-drill needs a reason; with one, the rollout starts, the audit log says who
    and why, and a skip_drill alert goes to the plan's channels through the outbox (not the
    leader's intent log, where an operator may not write)."""
    with store.sessions.begin() as session:
        pin_and_drill(session, example_plan(), tmp_path, drill=None)
    data = yaml.safe_load(EXAMPLE.read_text())
    data["alerts"] = {"channels": {"ops": {"webhook_env": "SLACK_WEBHOOK_OPS"}}, "default": ["ops"]}
    plan = tmp_path / "alerting.yaml"
    plan.write_text(yaml.safe_dump(data))
    code, _, err = bare_ctl("start", str(plan), "--skip-drill")
    assert code == 2 and "--reason: required with --skip-drill" in err
    rollout_id = bare_ctl.json(
        "start", str(plan), "--skip-drill", "--reason", "INC-42 hotfix", "-o", "json"
    )["id"]
    history = bare_ctl.json("history", str(rollout_id), "-o", "json")
    skipped = [e for e in history if e["kind"] == "drill_skipped"]
    assert len(skipped) == 1 and "INC-42 hotfix" in skipped[0]["detail"]
    with store.sessions.begin() as session:
        (alert,) = session.scalars(select(OutboxMessage)).all()
        assert session.scalars(select(Action)).all() == []
    assert (alert.topic, alert.severity, alert.rollout_id) == ("skip_drill", "warning", rollout_id)
    assert "INC-42 hotfix" in json.dumps(alert.message)


def test_an_unpinned_set_or_changed_files_refuse_the_start(
    bare_ctl: Ctl, store: StoreHandle, tmp_path: Path
) -> None:
    """No pinned sets: refused naming the field and the pin command. A file edited after
    pinning: refused naming the set and the file; nothing is created either time."""
    code, _, err = bare_ctl("start", str(EXAMPLE))
    assert code == 3
    assert "artefacts.stable: artefact set 'atlas-70b-fp8-msl32768' is not pinned" in err
    assert "rolloutctl artefact pin" in err
    with store.sessions.begin() as session:
        _, canary = pin_and_drill(session, example_plan(), tmp_path)
    (Path(canary.root) / "rank0.engine").write_bytes(b"tampered")
    code, _, err = bare_ctl("start", str(EXAMPLE))
    assert code == 3
    assert "'atlas-70b-fp8-msl8192' no longer matches its digests" in err
    assert "rank0.engine" in err
    assert bare_ctl.json("list", "-o", "json") == []
