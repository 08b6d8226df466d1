"""Every rolloutctl command, fed generated arguments, answers within its exit-code contract
with a message: never a traceback, never an "internal error".

The commands come from walking the click tree, so a new command is fuzzed as soon as it is
added. Each argument is drawn from what its parameter type invites: ids (huge, negative,
not numbers), floats (nan, inf, 1e308), choices, random text, URLs and paths to missing,
binary, oversized and deeply nested files. Every command runs in-process on a migrated
SQLite database holding pinned artefact sets and one pending rollout.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutd.cli.ctl import cli
from rolloutd.cli.errors import run_cli
from rolloutd.operations import start_rollout
from rolloutd.planfile import load_plan
from rolloutd.store.db import make_engine, session_factory
from tests.deploy.helpers import pin_and_drill
from tests.plans import EXAMPLE_PATH

settings.register_profile(
    "rolloutctl-fuzz",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FUZZ = settings.get_profile("rolloutctl-fuzz")

# Commands that start long-running things, left out with the reason:
EXCLUDED = {
    # runs a simulated fleet and the daemon for tens of seconds per invocation
    ("demo",),
    # serves simulated engines until interrupted
    ("sim",),
}
# Flags that turn a command into one that runs until something outside it happens:
# `status --watch` on the pending rollout redraws until the rollout ends.
EXCLUDED_FLAGS = {("status",): {"watch"}}
# Options whose generated values are narrowed: `eval` against an address that refuses
# connections still retries with backoff, so its runs stay short only with few retries; and
# `report --html` replaces the file it names, so it names only files of the test.
NARROWED: dict[tuple[str, ...], dict[str, list[str]]] = {
    ("eval",): {
        "timeout_s": ["0.1", "0.2", "0", "nan", "inf", "abc"],
        "retries": ["0", "0", "1", "-1", "11", "abc"],
    },
    ("report",): {"html_path": ["out.html", "missing/out.html", "files", "files/plan.yaml", ""]},
}
# Exit codes besides 0, 2 and 3 that a command documents: 1 when the check it runs fails.
ALSO_ALLOWED = {("artefact", "verify"): {1}, ("drill",): {1}}

IDS = st.one_of(
    st.sampled_from(
        [
            *["1", "2", "0", "000", "2147483647", "2147483648", "9223372036854775807"],
            *["9223372036854775808", "9" * 30, "9" * 5000, "1e3", "0x10", "abc", "", " 1 "],
            "\N{ARABIC-INDIC DIGIT ONE}",
        ]
    ),
    st.integers(-(2**70), 2**70).map(str),
)
FLOATS = st.one_of(
    st.sampled_from(
        [
            *["nan", "NaN", "inf", "-inf", "infinity", "1e308", "-1e308", "1e-320", "0", "-0"],
            *["0.05", "1", "1e400", "abc", ""],
        ]
    ),
    st.floats().map(repr),
    st.integers(-(2**70), 2**70).map(str),
)
# A command line cannot hold a NUL; a byte that is not UTF-8 reaches Python as a lone
# surrogate, which the generated text includes.
TEXT = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=40),
    st.sampled_from(["\udcff", "a\udcfeb", "-", "--", "--help", "atlas-70b-fp8-msl8192"]),
)
URLS = st.sampled_from(
    [
        "http://127.0.0.1:1",
        "http://127.0.0.1:99999",
        "http://[::1",
        "http://[::1]:1",
        "https://",
        "ftp://127.0.0.1:1",
        "http://127.0.0.1:1/v1?x=%zz",
        "http://user:pw@127.0.0.1:1",
        "127.0.0.1:1",
        "",
    ]
)


def _files(root: Path) -> dict[str, Path]:
    """Paths of every kind a command may be handed, under ``root``."""
    root.mkdir()
    plan = EXAMPLE_PATH.read_text().replace(
        "http://prometheus.ops.internal:9090", "http://127.0.0.1:9"
    )
    texts = {
        "plan.yaml": plan,
        "deep-value.yaml": plan.replace("pool_label: pool", "pool_label: " + "[" * 2000),
        "inf-engine.yaml": plan.replace("weights_gb: 70,", "weights_gb: .inf,"),
        "deep-list.json": "[" * 100_000,
        "deep-object.json": '{"a": ' * 100_000,
        "deep-flow.yaml": "a: " + "{b: " * 100_000,
        "bad-values.yaml": "name: 2025-13-45\nsteps: [!!float abc, " + "9" * 5000 + "]\n",
        "empty.yaml": "",
        "list.yaml": "- a\n- b\n",
        "model.json": '{"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096}',
        "huge-model.json": '{"num_hidden_layers": 1' + "0" * 400 + ', "num_attention_heads": 8}',
        "engine.yaml": "max_seq_len: 8192\nkv_cache_free_gpu_mem_fraction: 0.9\n",
        "suite.jsonl": "\n".join(
            (Path(__file__).parents[2] / "gates/suites/tool-args-300.jsonl")
            .read_text()
            .splitlines()[:2]
        ),
    }
    paths = {name: root / name for name in texts}
    for name, text in texts.items():
        paths[name].write_text(text)
    paths["binary"] = root / "model.safetensors"
    paths["binary"].write_bytes(b"\x00\x01\x02" * 100)
    paths["latin1"] = root / "latin1.yaml"
    paths["latin1"].write_bytes("name: café\n".encode("latin-1"))
    paths["oversized"] = root / "oversized.yaml"
    with paths["oversized"].open("wb") as handle:
        handle.truncate(3 * 1024 * 1024)
    paths["dir"] = root / "tree"
    (paths["dir"] / "sub").mkdir(parents=True)
    (paths["dir"] / "sub" / "weights.bin").write_bytes(b"w" * 100)
    paths["dir-non-utf8-name"] = root / "odd-tree"
    paths["dir-non-utf8-name"].mkdir()
    (root / "odd-tree" / "\udcff.bin").write_bytes(b"x")
    paths["non-utf8-name"] = root / "plan-\udcff.yaml"
    paths["non-utf8-name"].write_text(plan)
    paths["missing"] = root / "missing.yaml"
    paths["missing-dir"] = root / "missing" / "report.html"
    paths["dev-zero"] = Path("/dev/zero")
    paths["dev-null"] = Path("/dev/null")
    return paths


@pytest.fixture
def database(sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite database with the example plan's sets pinned and drilled, and one
    pending rollout (id 1)."""
    path = tmp_path / "rolloutd.db"
    shutil.copyfile(sqlite_template, path)
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    loaded = load_plan(EXAMPLE_PATH)
    with session_factory(engine).begin() as session:
        pin_and_drill(session, loaded.plan, tmp_path / "artefacts")
        start_rollout(session, loaded, actor="fuzz", now=datetime.now(UTC))
    engine.dispose()
    return url


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if (*path, name) in EXCLUDED:
            continue
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


# The file each parameter expects, by parameter name: what a sensible command line gives.
EXPECTED_FILES = {
    "files": "plan.yaml",
    "file": "plan.yaml",
    "plan_file": "plan.yaml",
    "model_config": "model.json",
    "engine_config": "engine.yaml",
    "suite": "suite.jsonl",
    "directory": "tree",
}
# A directory is walked and hashed whole: only small trees of the test, and paths that are
# not directories.
DIRECTORIES = ["tree", "odd-tree", "missing", "plan.yaml", "model.safetensors"]


def _sensible(param: click.Parameter, files: dict[str, Path]) -> st.SearchStrategy[str]:
    """Values a careful operator would give ``param``."""
    kind, name = param.type, param.name or ""
    if name in EXPECTED_FILES:
        return st.just(str(files["binary"].parent / EXPECTED_FILES[name]))
    if isinstance(kind, click.Choice):
        return st.sampled_from([str(choice) for choice in kind.choices])
    if isinstance(kind, click.FloatRange):
        return st.floats(
            kind.min if kind.min is not None else -1e6,
            kind.max if kind.max is not None else 1e6,
            exclude_min=kind.min_open and kind.min is not None,
            exclude_max=kind.max_open and kind.max is not None,
        ).map(repr)
    if isinstance(kind, click.IntRange):
        low = int(kind.min) if kind.min is not None else -(10**6)
        return st.integers(low, int(kind.max) if kind.max is not None else low + 10**6).map(str)
    if isinstance(kind, click.types.IntParamType) or kind.name == "id":
        return st.sampled_from(["1", "2"])
    if "endpoint" in name:
        return URLS
    return st.sampled_from(["atlas-70b-fp8-msl8192", "canary looked clean", "x"])


def _any(param: click.Parameter, files: dict[str, Path]) -> st.SearchStrategy[str]:
    """Values ``param`` invites by its type, most of them wrong."""
    kind = param.type
    if isinstance(kind, click.Path) and not kind.file_okay:
        return st.sampled_from([str(files["binary"].parent / name) for name in DIRECTORIES])
    if isinstance(kind, click.Path):
        paths = st.sampled_from(sorted(files.values())).map(str)
        return st.one_of(paths, TEXT.filter(lambda text: not text.startswith("/")))
    if isinstance(kind, click.Choice):
        return TEXT
    if isinstance(kind, click.types.FloatParamType):
        return FLOATS
    if isinstance(kind, click.types.IntParamType) or kind.name == "id":
        return IDS
    return st.one_of(TEXT, URLS)


@st.composite
def _argv(draw: Any, path: tuple[str, ...], files: dict[str, Path]) -> list[str]:
    """One command line for the command at ``path``: its required parameters usually, the
    others sometimes, the options in any order, now and then a stray word. How many values
    are sensible varies from line to line, so that some lines get past parsing."""
    command = _command(path)
    skipped = EXCLUDED_FLAGS.get(path, set())
    narrowed = NARROWED.get(path, {})
    sense = draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))

    def value(param: click.Parameter) -> str:
        if param.name in narrowed:
            return draw(st.sampled_from(narrowed[param.name]))
        sensible = draw(st.floats(0, 1)) < sense
        return draw(_sensible(param, files) if sensible else _any(param, files))

    positional: list[str] = []
    options: list[list[str]] = []
    for param in command.params:
        if param.name in skipped or param.name == "help":
            continue
        if draw(st.floats(0, 1)) >= (0.95 if param.required else 0.5):
            continue
        if isinstance(param, click.Argument):
            count = draw(st.integers(1, 3)) if param.nargs == -1 else 1
            positional += [value(param) for _ in range(count)]
        elif isinstance(param, click.Option):
            flag = param.opts[0]
            options.append([flag] if param.is_flag else [flag, value(param)])
    options = draw(st.permutations(options))
    argv = [*path, *positional, *(word for option in options for word in option)]
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(len(path), len(argv))), draw(TEXT))
    return argv


def _run(argv: list[str], url: str) -> tuple[int, str]:
    """Run rolloutctl in-process as its console script would: the exit code and all it
    printed."""
    runner = CliRunner()
    env = {"ROLLOUTD_DATABASE_URL": url, "ROLLOUTD_ENV_FILE": "/nonexistent"}
    with runner.isolation(env=env) as (stdout, stderr, _):
        try:
            code = run_cli(cli, "rolloutctl", argv)
        except SystemExit as exited:  # a command's own sys.exit(code)
            code = exited.code if isinstance(exited.code, int) else 1
        printed = stdout.getvalue() + stderr.getvalue()
    return code, printed.decode("utf-8", "replace")


COMMANDS = list(_commands(cli))


def test_the_walk_finds_the_commands_and_every_exclusion_names_one() -> None:
    """The walk finds the commands an operator uses most; each excluded command exists, so
    that no exclusion outlives its command."""
    assert {("status",), ("plan", "validate"), ("capacity",), ("eval",)} <= set(COMMANDS)
    for path in EXCLUDED | set(EXCLUDED_FLAGS) | set(NARROWED) | set(ALSO_ALLOWED):
        assert _command(path).name == path[-1]


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_generated_arguments_get_an_exit_code_of_the_contract_and_no_traceback(
    path: tuple[str, ...],
    database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the arguments, the command exits 0, 2 or 3 (or a code it documents) and
    prints neither a traceback nor an internal error."""
    files = _files(tmp_path / "files")
    monkeypatch.chdir(tmp_path)  # `report` writes rollout-ID.html here by default
    allowed = {0, 2, 3} | ALSO_ALLOWED.get(path, set())

    @FUZZ
    @given(argv=_argv(path, files))
    def run(argv: list[str]) -> None:
        code, printed = _run(argv, database)
        assert "Traceback" not in printed, printed
        assert "internal error" not in printed, printed
        assert code in allowed, (code, printed)

    run()
