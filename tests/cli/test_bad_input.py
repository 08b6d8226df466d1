"""rolloutctl refuses bad input (ids, numbers, text and files) with exit 2 and one message
naming the argument or file, before it queries or changes anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import func, select

from rolloutd.core.capacity import GiB
from rolloutd.operations import start_rollout
from rolloutd.planfile import load_plan
from rolloutd.store.models import Command, Rollout
from tests.cli import Ctl
from tests.deploy.helpers import pin_and_drill
from tests.plans import EXAMPLE_PATH, example_plan

if TYPE_CHECKING:
    from conftest import StoreHandle

MAX_ID = 2**31 - 1
ID_COMMANDS = [
    ["status"],
    ["history"],
    ["pause"],
    ["resume"],
    ["promote"],
    ["abort", "--reason", "x"],
    ["report"],
]


@pytest.fixture
def offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Ctl:
    """rolloutctl for commands that are refused before they would open the database (none
    exists at the URL it is given)."""
    return Ctl.on(f"sqlite:///{tmp_path}/absent.db", monkeypatch, capsys)


@pytest.fixture
def started(store: StoreHandle) -> int:
    """The id of a pending rollout of the example plan, on ``store``."""
    with store.sessions.begin() as session:
        return start_rollout(session, load_plan(EXAMPLE_PATH), actor="test", now=datetime.now(UTC))


def _local_plan(tmp_path: Path, old: str = "", new: str = "") -> str:
    """The example plan with its Prometheus on a local port nothing listens on (the preflight
    of `start` fails at once), and ``old`` replaced by ``new``."""
    text = EXAMPLE_PATH.read_text().replace(
        "http://prometheus.ops.internal:9090", "http://127.0.0.1:9"
    )
    if old:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return str(path)


def _counts(store: StoreHandle) -> tuple[int, int]:
    with store.sessions() as session:
        rollouts = session.scalar(select(func.count()).select_from(Rollout))
        commands = session.scalar(select(func.count()).select_from(Command))
    return int(rollouts or 0), int(commands or 0)


@pytest.mark.parametrize("command", ID_COMMANDS, ids=lambda c: c[0])
def test_ids_beyond_the_databases_range_are_bad_input(
    bare_ctl: Ctl, store: StoreHandle, started: int, command: list[str]
) -> None:
    """An id past the 32-bit INTEGER of Postgres (even past 2**63, which SQLite cannot bind)
    or below 1 exits 2 naming the ID, on SQLite and Postgres alike, and queues no command."""
    before = _counts(store)
    metavar = "[ID]" if command == ["status"] else "ID"
    for rollout_id in (str(MAX_ID + 1), str(2**63), "9" * 30, "0", "000"):
        code, _, err = bare_ctl(command[0], rollout_id, *command[1:])
        assert code == 2, err
        assert f"Invalid value for '{metavar}': " in err
        assert f"'{rollout_id}' is not an id: ids run from 1 to {MAX_ID}" in err
    assert _counts(store) == before


@pytest.mark.parametrize("command", ID_COMMANDS, ids=lambda c: c[0])
def test_the_largest_id_reaches_the_database_and_names_no_rollout(
    bare_ctl: Ctl, command: list[str]
) -> None:
    """2**31 - 1 is accepted: the database answers that there is no such rollout (exit 2)."""
    code, _, err = bare_ctl(command[0], str(MAX_ID), *command[1:])
    assert code == 2
    assert f"no rollout {MAX_ID}" in err


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["status", "1", "--watch", "--interval"], "--interval"),
        (["capacity", "--weights-gb"], "--weights-gb"),
        (["capacity", "--gpu-memory-gb"], "--gpu-memory-gb"),
        (["capacity", "--memory-fraction"], "--memory-fraction"),
        # --seed abc after the speed: were the speed accepted, the message would name --seed
        # and the demo would still not start.
        (["demo", "--output", "json", "--speed"], "--speed"),
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "-1e308"])
def test_float_options_refuse_non_finite_and_absurd_numbers(
    offline: Ctl, argv: list[str], option: str, value: str
) -> None:
    """nan, the infinities and 1e308 exit 2 naming the option."""
    code, _, err = (
        offline(*argv, value, "--seed", "abc") if argv[0] == "demo" else offline(*argv, value)
    )
    assert code == 2, err
    assert f"Invalid value for '{option}'" in err


@pytest.mark.parametrize("option", ["--max-seq-len", "--target-concurrency", "--gpus", "--tp"])
@pytest.mark.parametrize("value", ["1" + "0" * 39, str(2**31), "0"])
def test_integer_options_of_capacity_are_bounded(offline: Ctl, option: str, value: str) -> None:
    """A 40-digit (or 32-bit overflowing, or zero) count exits 2 naming the option."""
    code, _, err = offline("capacity", option, value)
    assert code == 2
    assert f"Invalid value for '{option}'" in err


def test_capacity_at_the_largest_accepted_values_answers(offline: Ctl) -> None:
    """At every upper bound the arithmetic still answers with whole figures."""
    top = ["--weights-gb", "100000", "--gpu-memory-gb", "100000", "--gpus", "65536"]
    top += ["--tp", "65536", "--max-seq-len", str(2**31 - 1), "--target-concurrency", "1"]
    code, out, err = offline("capacity", *top, "--output", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["by_max_seq_len"][0]["max_seq_len"] == 2**31 - 1
    assert data["max_seq_len_for_target"] > 0
    assert offline("capacity", *top)[0] == 0


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a": ' * 100_000, "[" * 100_000 + "]" * 100_000],
    ids=["open-lists", "open-objects", "closed-lists"],
)
def test_a_deeply_nested_model_config_is_bad_input(offline: Ctl, tmp_path: Path, text: str) -> None:
    """100,000 nested JSON arrays or objects exit 2: the file is nested too deeply."""
    config = tmp_path / "config.json"
    config.write_text(text)
    code, _, err = offline("capacity", "--model-config", str(config))
    assert code == 2
    assert err.strip() == f"rolloutctl: {config}: is nested too deeply to read"


def test_a_binary_model_config_gets_the_message_a_binary_plan_gets(
    offline: Ctl, tmp_path: Path
) -> None:
    """A model config holding NUL bytes is 'a binary file', as a plan would be."""
    config = tmp_path / "model.safetensors"
    config.write_bytes(b"\x00\x01\x02{}")
    code, _, err = offline("capacity", "--model-config", str(config))
    assert code == 2
    assert err.strip() == (
        f"rolloutctl: {config}: is a binary file; expected a HuggingFace config.json"
    )
    plan_code, plan_out, _ = offline("plan", "validate", str(config))
    assert (plan_code, plan_out.strip()) == (2, f"{config}: is a binary file; expected a YAML plan")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"num_hidden_layers": 80,', "is not valid JSON at line 1 column 26"),
        ("[1, 2]", "expected a JSON object at the top level"),
        ('{"num_hidden_layers": 1' + "0" * 400 + "}", "num_hidden_layers must be an integer"),
        ('{"num_hidden_layers": ' + "9" * 5000 + "}", "is not valid JSON: Exceeds the limit"),
    ],
    ids=["truncated", "list", "400-digit-layers", "5000-digit-number"],
)
def test_a_model_config_that_is_not_a_usable_object_is_bad_input(
    offline: Ctl, tmp_path: Path, content: str, message: str
) -> None:
    """Broken JSON, a list, or an absurd layer count exits 2 naming the file."""
    config = tmp_path / "config.json"
    config.write_text(content)
    code, _, err = offline("capacity", "--model-config", str(config))
    assert code == 2
    assert err.startswith(f"rolloutctl: {config}: ")
    assert message in err


def test_a_model_config_read_from_a_device_stops_at_the_limit(offline: Ctl) -> None:
    """/dev/zero has no size to stat; it is read to one byte past the limit, then refused."""
    code, _, err = offline("capacity", "--model-config", "/dev/zero")
    assert code == 2
    assert "/dev/zero: holds more than 1048576 bytes" in err


def test_a_suite_read_from_a_device_stops_at_the_limit(offline: Ctl) -> None:
    """``eval /dev/zero`` is refused after 64 MiB instead of reading until memory runs out."""
    code, _, err = offline("eval", "/dev/zero", "--endpoint", "http://127.0.0.1:9", "--no-store")
    assert code == 2
    assert "/dev/zero: holds more than 67108864 bytes; a suite may be at most" in err


@pytest.mark.parametrize(
    "nested",
    [
        "[" * 100_000,
        "{a: " * 100_000,
        "name: " + "[" * 100_000 + "]" * 100_000,
        "{a: " * 5_000 + "1" + "}" * 5_000,
        "- " * 100_000 + "x",
        "".join(" " * level + "a:\n" for level in range(1_000)),
    ],
    ids=[
        "open-flow-lists",
        "open-flow-maps",
        "closed-lists-under-a-key",
        "closed-maps",
        "block-lists-on-one-line",
        "indented-maps",
    ],
)
def test_a_deeply_nested_plan_is_bad_input_and_starts_nothing(
    bare_ctl: Ctl, store: StoreHandle, tmp_path: Path, nested: str
) -> None:
    """Nested YAML collections exit 2 (the file is nested too deeply) for `plan validate`
    and `start`, and no rollout is created. Before the depth was checked on the parser's
    events, libyaml's composer overflowed the C stack on these (a segmentation fault)."""
    plan = tmp_path / "deep.yaml"
    plan.write_text(nested)
    code, out, _ = bare_ctl("plan", "validate", str(plan))
    assert (code, out.strip()) == (2, f"{plan}: is nested too deeply to read")
    code, _, err = bare_ctl("start", str(plan))
    assert (code, err.strip()) == (2, f"rolloutctl: {plan}: is nested too deeply to read")
    assert _counts(store) == (0, 0)


def test_a_deep_value_inside_a_valid_plan_is_bad_input(offline: Ctl, tmp_path: Path) -> None:
    """A value nested 2,000 deep in an otherwise valid plan is refused as too deeply nested."""
    plan = _local_plan(tmp_path, "pool_label: pool", "pool_label: " + "[" * 2_000 + "]" * 2_000)
    code, out, _ = offline("plan", "validate", plan)
    assert (code, out.strip()) == (2, f"{plan}: is nested too deeply to read")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (".inf", "input should be a finite number"),
        ("1.0e+308", "input should be less than or equal to 100000, got 1e+308"),
    ],
)
def test_a_plan_with_an_absurd_engine_size_is_a_problem(
    offline: Ctl, tmp_path: Path, value: str, message: str
) -> None:
    """weights_gb .inf or 1.0e+308 in capacity.engine cannot reach the KV-cache arithmetic:
    the plan is refused and the problem names the field."""
    plan = _local_plan(tmp_path, "weights_gb: 70,", f"weights_gb: {value},")
    code, out, _ = offline("plan", "validate", plan, "--output", "json")
    assert code == 2
    (result,) = json.loads(out)
    assert result["problems"] == [
        {"source": plan, "field": "capacity.engine.weights_gb", "message": message}
    ]


def test_plan_validate_json_lists_each_file_with_its_problems_and_warnings(
    offline: Ctl, tmp_path: Path
) -> None:
    """`plan validate -o json` prints one object per file (file, ok, problems, warnings) and
    exits 2 when any file has a problem."""
    good = _local_plan(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(good).read_text().replace("weight: 25", "weight: 150"))
    missing = tmp_path / "missing.yaml"
    code, out, _ = offline("plan", "validate", good, str(bad), str(missing), "-o", "json")
    assert code == 2
    results = json.loads(out)
    assert [(r["file"], r["ok"]) for r in results] == [
        (good, True),
        (str(bad), False),
        (str(missing), False),
    ]
    assert results[0]["problems"] == []
    (problem,) = results[1]["problems"]
    assert (problem["source"], problem["field"]) == (str(bad), "steps[3].weight")
    assert results[2]["problems"] == [
        {"source": str(missing), "field": "", "message": "no such file"}
    ]
    code, out, _ = offline("plan", "validate", good, "-o", "json")
    assert code == 0
    assert json.loads(out)[0]["ok"] is True


def test_plan_validate_help_shows_the_json_output(offline: Ctl) -> None:
    """`plan validate --help` documents --output json with an example."""
    code, out, _ = offline("plan", "validate", "--help")
    assert code == 0
    assert "--output" in out and "rolloutctl plan validate plans/*.yaml -o json" in out


def test_capacity_shows_the_overhead_it_subtracts(offline: Ctl) -> None:
    """The per-GPU overhead appears in both outputs, and the budget less the weights and the
    overhead of every GPU of a copy is the KV pool."""
    data = json.loads(offline("capacity", "--output", "json")[1])
    assert data["overhead_bytes_per_gpu"] == GiB
    tp = 4
    pool = data["memory_budget_bytes"] - data["weight_bytes"] - tp * data["overhead_bytes_per_gpu"]
    assert pool == data["kv_pool_bytes"]
    code, out, _ = offline("capacity")
    assert code == 0
    assert "172.8 GB budget - 70.0 GB weights - 4.3 GB overhead = 98.5 GB KV pool" in out
    assert "overhead per GPU: 1.07 GB" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["abort", "{id}", "--reason", "\udcff"],
        ["pause", "{id}", "-r", "disk \udcfe full"],
        ["artefact", "show", "\udcff"],
        ["artefact", "verify", "set-\udcff"],
    ],
)
def test_text_that_is_not_utf8_is_bad_input(
    bare_ctl: Ctl, store: StoreHandle, started: int, argv: list[str]
) -> None:
    """A reason or a name holding a byte that is not UTF-8 (a shell passes it as a lone
    surrogate) exits 2 naming the argument, and writes nothing."""
    before = _counts(store)
    code, _, err = bare_ctl(*(arg.format(id=started) for arg in argv))
    assert code == 2
    assert "is not UTF-8 text" in err
    assert _counts(store) == before


def test_a_plan_at_a_path_that_is_not_utf8_is_refused_by_start(
    bare_ctl: Ctl, store: StoreHandle, tmp_path: Path
) -> None:
    """`start` keeps the plan's path in the audit log: a path that is not UTF-8 exits 2
    naming FILE, and no rollout is created."""
    with store.sessions.begin() as session:
        pin_and_drill(session, example_plan(), tmp_path / "artefacts")
    plan = tmp_path / "plan-\udcff.yaml"
    plan.write_text(Path(_local_plan(tmp_path)).read_text())
    code, _, err = bare_ctl("start", str(plan))
    assert code == 2
    assert "Invalid value for 'FILE'" in err and "is not UTF-8 text" in err
    assert _counts(store) == (0, 0)


def test_a_path_that_is_not_utf8_is_echoed_even_on_a_strict_terminal(tmp_path: Path) -> None:
    """A file named in Latin-1 is echoed back as an escape, even where stdout is strict
    UTF-8 (PYTHONIOENCODING=utf-8, or en_US.UTF-8): exit 2, not a crash."""
    missing = os.fsencode(tmp_path) + b"/caf\xe9.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "rolloutd.cli.ctl", "plan", "validate", missing],
        env={**os.environ, "PYTHONIOENCODING": "utf-8", "ROLLOUTD_ENV_FILE": "/nonexistent"},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout.decode() == f"{tmp_path}/caf\\udce9.yaml: no such file\n"


def test_a_deeply_nested_engine_config_is_bad_input_and_pins_nothing(
    bare_ctl: Ctl, tmp_path: Path
) -> None:
    """`artefact pin --engine-config` with 100,000 nested YAML mappings exits 2 naming the
    file, and no set is pinned."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "config.json").write_text("{}")
    config = tmp_path / "engine.yaml"
    config.write_text("max_seq_len: " + "{a: " * 100_000)
    code, _, err = bare_ctl(
        "artefact", "pin", "n1", str(tree), "--engine", "vllm", "--engine-config", str(config)
    )
    assert (code, err.strip()) == (2, f"rolloutctl: {config}: is nested too deeply to read")
    assert bare_ctl.json("artefact", "list") == []


def test_a_plan_naming_deeply_nested_templates_is_bad_input(offline: Ctl, tmp_path: Path) -> None:
    """A metrics template file of 50,000 nested YAML mappings makes the plan bad input that
    names the template file."""
    templates = tmp_path / "templates.yaml"
    templates.write_text("signals: " + "{a: " * 50_000)
    plan = _local_plan(tmp_path, "templates: triton-trtllm", f"templates: {templates}")
    code, out, _ = offline("plan", "validate", plan)
    assert (code, out.strip()) == (2, f"{templates}: is nested too deeply to read")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2025-13-45", "cannot read this value as timestamp: month must be in 1..12"),
        ('!!float "abc"', "cannot read this value as float: could not convert string"),
        ('!!timestamp "x"', "cannot read this value as timestamp: malformed"),
        ("9" * 5000, "cannot read this value as int: Exceeds the limit (4300 digits)"),
    ],
    ids=["month-13", "float-tag", "timestamp-tag", "5000-digits"],
)
def test_a_plan_value_yaml_cannot_construct_is_bad_input_at_its_line(
    offline: Ctl, tmp_path: Path, value: str, message: str
) -> None:
    """A scalar its YAML tag cannot hold is reported at its line and column, exit 2."""
    plan = _local_plan(tmp_path, "num_layers: 80", f"num_layers: {value}")
    lines = Path(plan).read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "num_layers: " in text)
    column = lines[line - 1].index("num_layers: ") + len("num_layers: ") + 1
    code, out, _ = offline("plan", "validate", plan)
    assert code == 2
    assert out.startswith(f"{plan}: is not valid YAML at line {line} column {column}: {message}")


@pytest.mark.parametrize(
    ("line", "changed", "message"),
    [
        ("target_concurrency: 60", "target_concurrency: " + "9" * 400, "less than or equal to"),
        ("weights_gb: 70", "weights_gb: .inf", "a finite number"),
        ("gpu_memory_gb: 48", "gpu_memory_gb: .nan", "a finite number"),
        ("num_layers: 80", "num_layers: " + "9" * 50, "less than or equal to"),
    ],
)
def test_a_plan_with_capacity_figures_past_the_arithmetic_is_a_problem(
    bare_ctl: Ctl, tmp_path: Path, line: str, changed: str, message: str
) -> None:
    """Capacity figures no deployment has (a 400-digit concurrency, infinite weights) are
    problems naming the field, not a crash in the KV-cache arithmetic."""
    source = EXAMPLE_PATH.read_text()
    assert line in source
    plan = tmp_path / "plan.yaml"
    plan.write_text(source.replace(line, changed))
    code, out, _ = bare_ctl("plan", "validate", str(plan))
    field = line.split(":", maxsplit=1)[0]
    assert code == 2
    assert f"{plan}: capacity." in out and f"{field}: input should be" in out and message in out


@pytest.mark.parametrize("command", [["list"], ["status", "1"], ["history", "1"], ["status"]])
def test_a_read_command_without_a_database_creates_no_file(
    tmp_path: Path, command: list[str]
) -> None:
    """With no ROLLOUTD_DATABASE_URL and no rolloutd.db here, a read command says where it
    looked and how to point it elsewhere, exits non-zero, and leaves no database file."""
    env = {k: v for k, v in os.environ.items() if k.upper() != "ROLLOUTD_DATABASE_URL"}
    env["ROLLOUTD_ENV_FILE"] = str(tmp_path / "absent.env")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-m", "rolloutd.cli.ctl", *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert (
        "no rolloutd database at sqlite:///rolloutd.db (set ROLLOUTD_DATABASE_URL)" in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
