"""rolloutd.core.plan and rolloutd.planfile: the plan's shape, loading and every bad input."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from _pytest.mark import ParameterSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutd import planfile
from rolloutd.core.plan import (
    CanaryStep,
    EventsGate,
    FullStep,
    PauseStep,
    RollbackAfter,
    ShadowStep,
    SteadyStep,
    SuiteGate,
    ThresholdGate,
)
from rolloutd.errors import BadInput, Problem
from rolloutd.planfile import MAX_PLAN_BYTES, load_plan, parse_plan
from tests.plans import (
    EXAMPLE_PATH,
    SOURCE,
    example_dict,
    example_plan,
    plan_of,
    problems_in,
    problems_of,
    small_dict,
    to_yaml,
)

Mutation = Callable[[dict[str, Any]], object]


def fields(problems: tuple[Problem, ...]) -> list[str]:
    """The field paths of ``problems``, in the order reported."""
    return [p.field for p in problems]


def load_problems(path: Path) -> tuple[Problem, ...]:
    """The problems ``load_plan`` reports for ``path``."""
    with pytest.raises(BadInput) as info:
        load_plan(path)
    return info.value.problems


# --- the worked example -----------------------------------------------------------------------


def test_example_plan_loads_with_its_source_and_text() -> None:
    """The reference plan validates and keeps the file name and text it came from."""
    loaded = load_plan(EXAMPLE_PATH)
    assert loaded.source == str(EXAMPLE_PATH)
    assert loaded.text == EXAMPLE_PATH.read_text(encoding="utf-8")
    assert loaded.plan.name == "atlas-70b-maxseq8192"
    assert loaded.plan.environment == "production"


def test_example_plan_steps_are_shadow_two_canaries_manual_promotion_full_steady() -> None:
    """The example walks shadow, 5% and 25% for 48h each, awaits promotion, then full and steady."""
    steps = example_plan().steps
    assert [type(s) for s in steps] == [
        ShadowStep,
        CanaryStep,
        CanaryStep,
        PauseStep,
        FullStep,
        SteadyStep,
    ]
    canaries = [s for s in steps if isinstance(s, CanaryStep)]
    assert [(c.weight, c.bake) for c in canaries] == [
        (5, timedelta(hours=48)),
        (25, timedelta(hours=48)),
    ]
    pause = steps[3]
    assert isinstance(pause, PauseStep)
    assert pause.duration is None
    assert pause.title() == "awaiting promotion"
    assert steps[5].hold_for() == timedelta(days=7)


def test_example_plan_rollback_triggers_are_the_four_from_the_design() -> None:
    """Queue timeouts over 5%, any OOM, schema violations over 1% and a 1-point exactness drop."""
    plan = example_plan()
    gates = [plan.gates[name] for name in plan.rollback.triggers]
    assert len(gates) == 4
    queue, oom, schema, exactness = gates
    assert isinstance(queue, ThresholdGate)
    assert (queue.signal, queue.max) == ("queue_timeout_rate", 0.05)
    assert isinstance(oom, EventsGate)
    assert (oom.signal, oom.max_events) == ("oom_events", 0)
    assert isinstance(schema, ThresholdGate)
    assert (schema.signal, schema.max) == ("schema_violation_rate", 0.01)
    assert isinstance(exactness, SuiteGate)
    assert (exactness.rule, exactness.max_drop_points) == ("max_drop", 1.0)


def test_step_weight_and_mirroring_of_the_example_plan() -> None:
    """Each step's weight is its own; the pause keeps 25%; HAProxy's shadow does not mirror."""
    plan = example_plan()
    indexes = range(len(plan.steps))
    assert [plan.step_weight(i) for i in indexes] == [0, 5, 25, 25, 100, 100]
    assert not any(plan.step_mirrors(i) for i in indexes)


def test_a_mirroring_shadow_step_on_haproxy_is_refused() -> None:
    """HAProxy cannot mirror, so a shadow step that asks for it is a problem naming the step."""
    data = example_dict()
    del data["steps"][0]["mirror"]
    (problem,) = problems_of(data)
    assert problem.field == "steps[1].mirror"
    assert "HAProxy cannot mirror" in problem.message


def test_plan_problems_count_steps_from_1_as_every_view_does() -> None:
    """The second step (``steps[1]`` to Python) is ``steps[2]`` in a problem, as it is
    ``step 2 of 6`` in status, history and the web view."""
    data = example_dict()
    data["steps"][1]["bake"] = "forever"
    (problem,) = problems_of(data)
    assert problem.field == "steps[2].bake"


def test_an_unknown_key_names_the_nearest_known_one() -> None:
    """A misspelt key is reported with the key of that section it is nearest to."""
    data = example_dict()
    data["steps"][1]["bkae"] = data["steps"][1].pop("bake")
    data["router"]["sockte"] = "/run/haproxy.sock"
    problems = problems_of(data)
    found = {p.field: p.message for p in problems}
    assert found["steps[2].bkae"] == "unknown key (did you mean bake?)"
    assert found["router.sockte"].startswith("unknown key (did you mean socket")


def test_an_unknown_key_like_no_known_one_suggests_nothing() -> None:
    """A key far from every key of its section is only 'unknown key'."""
    data = example_dict()
    data["zzzqqq"] = 1
    (problem,) = problems_of(data)
    assert (problem.field, problem.message) == ("zzzqqq", "unknown key")


def test_a_pause_after_shadow_keeps_weight_zero_and_keeps_mirroring() -> None:
    """A pause right after shadow holds weight 0 with traffic still mirrored."""
    plan = plan_of(small_dict())
    assert isinstance(plan.steps[1], PauseStep)
    assert plan.step_weight(1) == 0
    assert plan.step_mirrors(1) is True
    assert (plan.step_weight(2), plan.step_mirrors(2)) == (10, False)
    # Mirrored at 0% the canary has traffic; at 10% neither pool is idle; at 100% stable is.
    assert [plan.idle_pool(i) for i in (1, 2, 3)] == [None, None, "stable"]


def test_gates_of_a_step_are_the_names_it_lists() -> None:
    """``gates_of`` returns a step's gate names in plan order, empty for a step without gates."""
    plan = example_plan()
    assert plan.gates_of(0) == ("tool_args_no_regression",)
    assert plan.gates_of(4) == ()


def test_steps_are_numbered_from_one_of_the_plans_count_with_their_name() -> None:
    """The second of the example's six steps reads ``step 2 of 6 (canary 5%)``."""
    plan = example_plan()
    assert [plan.step_named(i) for i in (0, 1, 5)] == [
        "step 1 of 6 (shadow)",
        "step 2 of 6 (canary 5%)",
        "step 6 of 6 (steady)",
    ]


# --- the executor a rollback needs ----------------------------------------------------------


def test_a_production_plan_without_an_executor_is_refused() -> None:
    """Leaving the section out would make a production rollback move traffic only, silently."""
    data = example_dict()
    del data["executor"]
    (problem,) = problems_of(data)
    assert problem.field == "executor"
    assert "needs an executor (kind: command, triton or systemd)" in problem.message
    assert "{kind: none, reason:" in problem.message


@pytest.mark.parametrize(
    ("executor", "field"),
    [
        ({"kind": "none"}, "executor"),
        ({"kind": "none", "reason": ""}, "executor.reason"),
        ({"kind": "none", "reason": "  \t"}, "executor.reason"),
    ],
)
def test_a_production_plan_without_an_executor_must_say_why(
    executor: dict[str, str], field: str
) -> None:
    """``kind: none`` in production needs a reason that says something."""
    (problem,) = problems_of({**example_dict(), "executor": executor})
    assert problem.field == field


def test_a_production_plan_may_roll_back_traffic_only_when_it_says_why() -> None:
    """``executor: {kind: none, reason: ...}`` is a choice written down: the plan is valid."""
    reason = "the engines are redeployed by the fleet's own pipeline"
    plan = plan_of({**example_dict(), "executor": {"kind": "none", "reason": reason}})
    assert (plan.executor.kind, getattr(plan.executor, "reason", None)) == ("none", reason)


def test_a_staging_plan_needs_no_executor() -> None:
    """Outside production a plan without an executor is valid as it was: traffic only."""
    data = {**example_dict(), "environment": "staging"}
    del data["executor"]
    assert plan_of(data).executor.kind == "none"


# --- content hash ---------------------------------------------------------------------------


def test_content_hash_is_stable_for_the_same_plan() -> None:
    """Loading the same file twice gives the same sha256 hex digest."""
    first, second = load_plan(EXAMPLE_PATH), load_plan(EXAMPLE_PATH)
    assert first.content_hash == second.content_hash
    assert re.fullmatch(r"[0-9a-f]{64}", first.content_hash)


def test_content_hash_ignores_comments_key_order_and_layout() -> None:
    """The example re-written without comments, keys sorted and in flow style hashes the same."""
    original = load_plan(EXAMPLE_PATH)
    rewritten = yaml.safe_dump(example_dict(), sort_keys=True, default_flow_style=True, width=60)
    assert "#" not in rewritten
    assert parse_plan(rewritten).content_hash == original.content_hash


def test_content_hash_changes_when_a_weight_changes() -> None:
    """Changing the first canary weight from 5 to 6 changes the hash."""
    data = example_dict()
    data["steps"][1]["weight"] = 6
    assert parse_plan(to_yaml(data)).content_hash != load_plan(EXAMPLE_PATH).content_hash


# --- bad fields -----------------------------------------------------------------------------


def _set(*path: Any, value: Any) -> Mutation:
    """A mutation that sets ``value`` at ``path`` in a plan dict."""

    def mutate(data: dict[str, Any]) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _bad(
    field: str, value: Any, expected: str, id: str, *, reported_at: str | None = None
) -> ParameterSet:
    """A case of the table below: ``value`` written at ``field`` is one problem reported at
    ``reported_at`` (the same field unless given) whose message holds ``expected``."""
    path = [int(key) if key.isdigit() else key for key in re.findall(r"[^.\[\]]+", field)]
    return pytest.param(_set(*path, value=value), _shown(reported_at or field), expected, id=id)


def _shown(field: str) -> str:
    """``field`` (Python's indexes) as a problem names it: steps counted from 1."""
    return re.sub(r"steps\[(\d+)\]", lambda m: f"steps[{int(m.group(1)) + 1}]", field)


def _misplaced(
    index: int, step: dict[str, Any], expected: str, id: str, *, reported_at: str | None = None
) -> ParameterSet:
    """A case of the table below: ``step`` inserted at ``index`` is one problem reported at
    ``reported_at`` (the inserted step's kind unless given) whose message holds ``expected``."""
    field = _shown(reported_at or f"steps[{index}].kind")
    return pytest.param(lambda data: data["steps"].insert(index, step), field, expected, id=id)


def _append_trigger(name: str) -> Mutation:
    return lambda data: data["rollback"]["triggers"].append(name)


BAD_FIELDS = [
    _bad("stesp", [], "unknown key", "unknown-top-level-key"),
    _bad("router.sockte", "/run/x", "unknown key", "router.sockte"),
    _bad("gates.queue_timeouts.maxx", 1, "unknown key", "unknown-gate-key"),
    _bad("steps[1].baek", "1h", "unknown key", "unknown-step-key"),
    _bad("steps[1].weight", 0, "got 0", "weight-0"),
    _bad("steps[1].weight", 100, "got 100", "weight-100"),
    _bad("steps[1].weight", 150, "got 150", "weight-150"),
    _bad("steps[1].weight", -1, "got -1", "weight-neg"),
    _bad("steps[1].weight", "5", "valid integer", "weight-text"),
    _bad("steps[1].weight", True, "valid integer", "weight-bool"),
    _bad("steps[0].weight", 5, "got 5", "shadow-weight-5"),
    _bad("steps[4].weight", 50, "got 50", "full-weight-50"),
    _bad(
        "steps[2].weight",
        5,
        "weights must increase from step to step: 5 after 5",
        "weight-repeated",
    ),
    _bad(
        "steps[2].weight",
        3,
        "weights must increase from step to step: 3 after 5",
        "weight-decreasing",
    ),
    _misplaced(
        4,
        {"kind": "canary", "weight": 20, "bake": "1h"},
        "20 after 25",
        "weight-decreasing-after-pause",
        reported_at="steps[4].weight",
    ),
    _bad("steps[1].bake", "forever", "'forever'", "bake-forever"),
    _bad(
        "steps[1].bake",
        48,
        "expected a duration such as '30s', '90m' or '48h', got 48",
        "bake-bare-number",
    ),
    _bad("limits.progress_deadline", "12 hours", "'12 hours'", "deadline-unparsable"),
    _bad("gates.queue_timeouts.max", "1%", "valid number, got '1%'", "threshold-text"),
    _bad("gates.queue_timeouts.max", True, "valid number, got True", "threshold-bool"),
    _bad("gates.canary_oom.max_events", False, "valid integer, got False", "max-events-bool"),
    _bad("gates.e2e_latency_p95.target_seconds", "14s", "valid number", "latency-target-text"),
    _bad("limits.max_inconclusive", True, "valid integer", "limit-bool"),
    _misplaced(
        5,
        {"kind": "canary", "weight": 50, "bake": "1h"},
        "only 'steady' may follow 'full', got 'canary'",
        "canary-after-full",
    ),
    _misplaced(
        5, {"kind": "pause"}, "only 'steady' may follow 'full', got 'pause'", "pause-after-full"
    ),
    _misplaced(
        4, {"kind": "steady"}, "'steady' must come after a 'full' step", "steady-before-full"
    ),
    _misplaced(0, {"kind": "pause"}, "a plan cannot start with 'pause'", "pause-first"),
    _misplaced(
        3,
        {"kind": "shadow", "mirror": False},
        "'shadow' must come before any step that shifts traffic",
        "shadow-after-canary",
    ),
    pytest.param(
        _append_trigger("no_such_gate"),
        "rollback.triggers[4]",
        "gate 'no_such_gate' is not defined under 'gates'",
        id="undefined-trigger",
    ),
    _bad(
        "steps[1].gates",
        ["queue_timeouts", "latency"],
        "gate 'latency' is not defined under 'gates'",
        "undefined-step-gate",
        reported_at="steps[1].gates[1]",
    ),
    _bad(
        "steps[1]",
        {"kind": "blue", "weight": 5},
        "unknown kind 'blue'; expected one of 'shadow', 'canary', 'pause', 'full', 'steady'",
        "unknown-step-kind",
    ),
    _bad(
        "steps[1]",
        {"weight": 5, "bake": "48h"},
        "needs 'kind' to say which kind it is",
        "missing-step-kind",
    ),
    _bad("gates.odd", {"kind": "vibes"}, "unknown kind 'vibes'", "unknown-gate-kind"),
    _bad("router.driver", "envoy", "unknown driver 'envoy'", "driver", reported_at="router"),
    pytest.param(lambda d: d.pop("service"), "service", "required, but missing", id="missing-key"),
    _bad(
        "gates.queue_timeouts.min",
        0.5,
        "'min' is greater than 'max'",
        "threshold-min-over-max",
        reported_at="gates.queue_timeouts",
    ),
    _bad(
        "trigger_interval", "1m", "must not be longer than 'interval'", "trigger-interval-too-long"
    ),
    _bad("trigger_interval", "0s", "must be longer than 0s", "trigger-interval-zero"),
    _bad(
        "gates.queue_timeouts.on_no_data",
        "sometimes",
        "expected 'hold', 'rollback' or {rollback_after: DURATION}",
        "on-no-data-unknown",
    ),
    _bad(
        "gates.queue_timeouts.on_no_data",
        {"rollback_after": "0s"},
        "longer than 0s",
        "rollback-after-zero",
    ),
    _bad(
        "gates.queue_timeouts.on_no_data",
        {"rollback_after": "soon"},
        "got 'soon'",
        "rollback-after-unparsable",
    ),
    _bad(
        "steps[1].min_samples",
        {"canary_oom": 5},
        "'canary_oom' is not one of this step's gates",
        "min-samples-of-another-gate",
        reported_at="steps[1].min_samples.canary_oom",
    ),
    _bad(
        "steps[1].min_samples",
        {"queue_timeouts": 0},
        "greater than or equal to 1",
        "min-samples-zero",
        reported_at="steps[1].min_samples.queue_timeouts",
    ),
    _bad(
        "steps[3].min_samples",
        {"queue_timeouts": 500},
        "a pause step judges no gates",
        "min-samples-on-a-pause",
    ),
    _bad("steps[1].max_extension", "a while", "got 'a while'", "max-extension-unparsable"),
]


@pytest.mark.parametrize(("mutate", "field", "expected"), BAD_FIELDS)
def test_a_bad_field_is_reported_once_with_file_field_and_what_was_expected(
    mutate: Mutation, field: str, expected: str
) -> None:
    """Each broken rule in the example plan gives exactly one problem naming file and field."""
    data = example_dict()
    mutate(data)
    problems = problems_of(data)
    assert [(p.source, p.field) for p in problems] == [(SOURCE, field)]
    assert expected in problems[0].message


def test_a_threshold_may_be_written_as_an_integer() -> None:
    """``max: 1`` is a number, so strict validation still accepts it as 1.0."""
    data = example_dict()
    data["gates"]["queue_timeouts"]["max"] = 1
    gate = plan_of(data).gates["queue_timeouts"]
    assert isinstance(gate, ThresholdGate)
    assert gate.max == 1.0


def test_several_field_problems_in_one_file_are_all_reported() -> None:
    """An unknown key, a weight out of range and a text threshold are reported together."""
    data = example_dict()
    data["router"]["sockte"] = "/run/x"
    data["steps"][1]["weight"] = 150
    data["gates"]["queue_timeouts"]["max"] = "1%"
    assert sorted(fields(problems_of(data))) == [
        "gates.queue_timeouts.max",
        "router.sockte",
        "steps[2].weight",
    ]


def test_several_cross_field_problems_in_one_file_are_all_reported() -> None:
    """An undefined trigger, an undefined step gate and a misplaced steady are reported together."""
    data = example_dict()
    data["rollback"]["triggers"].append("nope")
    data["steps"][2]["gates"].append("also_nope")
    data["steps"].insert(4, {"kind": "steady"})
    assert sorted(fields(problems_of(data))) == [
        "rollback.triggers[4]",
        "steps[3].gates[5]",
        "steps[5].kind",
    ]


# --- bad text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- a\n- b\n", "a list"), ("hello\n", "a string"), ("42\n", "a number")],
    ids=["list", "string", "number"],
)
def test_yaml_that_is_not_a_mapping_is_rejected(text: str, kind: str) -> None:
    """A top-level list or scalar is one problem on the whole file saying a mapping was expected."""
    (problem,) = problems_in(text)
    assert (problem.source, problem.field) == (SOURCE, "")
    assert problem.message == f"expected a YAML mapping at the top level, got {kind}"


@pytest.mark.parametrize("text", ["", "  \n\t\n"], ids=["empty", "whitespace"])
def test_empty_text_is_rejected_as_empty(text: str) -> None:
    """Empty and whitespace-only plans are reported as empty."""
    (problem,) = problems_in(text)
    assert (problem.field, problem.message) == (
        "",
        "is empty; expected a YAML mapping with the plan",
    )


def test_invalid_yaml_names_the_line_and_column() -> None:
    """A syntax error is reported with the line and column where YAML gave up."""
    (problem,) = problems_in("name: x\n  service: y\n")
    assert problem.field == ""
    assert re.search(r"is not valid YAML at line 2 column \d+", problem.message)


def test_a_key_given_twice_is_rejected_with_its_line() -> None:
    """YAML would silently keep the last ``pool_label``; the loader refuses it instead."""
    text = EXAMPLE_PATH.read_text(encoding="utf-8")
    line = text.splitlines().index("  pool_label: pool") + 2
    doubled = text.replace("  pool_label: pool\n", "  pool_label: pool\n  pool_label: other\n")
    (problem,) = problems_in(doubled)
    assert f"line {line} column 3" in problem.message
    assert "key 'pool_label' appears twice in one mapping" in problem.message


def test_python_object_tags_are_refused() -> None:
    """The safe loader rejects a tag that would construct a Python object."""
    (problem,) = problems_in('!!python/object/apply:os.system ["true"]\n')
    assert "could not determine a constructor" in problem.message


def test_a_key_yaml_reads_as_a_number_is_not_shown_as_a_list_index() -> None:
    """A top-level ``5:`` key is named by the key, not as ``[5]`` which reads as a list item."""
    text = EXAMPLE_PATH.read_text(encoding="utf-8") + "\n5: five\n"
    (problem,) = problems_in(text)
    assert (problem.field, problem.message) == ("5", "keys should be strings")


def test_a_duration_too_long_for_a_timedelta_is_bad_input() -> None:
    """``bake: 1000000000d`` is reported on steps[2].bake instead of crashing."""
    data = example_dict()
    data["steps"][1]["bake"] = "1000000000d"
    assert fields(problems_of(data)) == ["steps[2].bake"]


# --- bad files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty; expected a YAML mapping with the plan"),
        (b"   \n\n", "is empty; expected a YAML mapping with the plan"),
        (b"name: x\x00\x01\x02\n", "is a binary file; expected a YAML plan"),
        (b"name: caf\xe9\n", "is not UTF-8 text; expected a YAML plan"),
    ],
    ids=["empty", "whitespace", "binary", "latin-1"],
)
def test_unreadable_files_are_one_problem_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    """Empty, binary and non-UTF-8 files are reported against the file path."""
    path = tmp_path / "plan.yaml"
    path.write_bytes(content)
    assert load_problems(path) == (Problem(str(path), "", message),)


def test_a_file_over_one_mebibyte_is_rejected_with_its_size(tmp_path: Path) -> None:
    """One byte over 1 MiB is refused with the size and the limit."""
    assert MAX_PLAN_BYTES == 1024 * 1024
    path = tmp_path / "plan.yaml"
    path.write_bytes(b"#" * (MAX_PLAN_BYTES + 1))
    (problem,) = load_problems(path)
    assert problem.source == str(path)
    assert problem.message == (
        f"is {MAX_PLAN_BYTES + 1} bytes; a plan may be at most {MAX_PLAN_BYTES} bytes (1 MiB)"
    )


def test_the_size_limit_is_inclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of exactly the limit loads; one byte more is refused (limit lowered to stay fast)."""
    text = EXAMPLE_PATH.read_bytes()
    monkeypatch.setattr(planfile, "MAX_PLAN_BYTES", len(text))
    path = tmp_path / "plan.yaml"
    path.write_bytes(text)
    assert load_plan(path).content_hash == load_plan(EXAMPLE_PATH).content_hash
    path.write_bytes(text + b"\n")
    (problem,) = load_problems(path)
    assert problem.message.startswith(f"is {len(text) + 1} bytes; a plan may be at most")


def test_a_missing_file_is_reported_as_no_such_file(tmp_path: Path) -> None:
    """A path that does not exist is one problem, not a traceback."""
    path = tmp_path / "absent.yaml"
    assert load_problems(path) == (Problem(str(path), "", "no such file"),)


def test_a_directory_is_reported_as_not_a_plan_file(tmp_path: Path) -> None:
    """Passing a directory says so instead of failing to read it."""
    assert load_problems(tmp_path) == (
        Problem(str(tmp_path), "", "is a directory; expected a YAML plan file"),
    )


def test_problems_from_a_file_name_that_file(tmp_path: Path) -> None:
    """Field problems found in a file carry the file's path as their source."""
    data = example_dict()
    data["steps"][1]["weight"] = 150
    path = tmp_path / "mine.yaml"
    path.write_text(to_yaml(data), encoding="utf-8")
    assert [(p.source, p.field) for p in load_problems(path)] == [(str(path), "steps[2].weight")]


def test_bad_input_renders_one_line_per_problem() -> None:
    """The error text a CLI prints is 'file: field: message', one problem per line."""
    data = example_dict()
    data["router"]["sockte"] = "x"
    data["steps"][1]["weight"] = 150
    with pytest.raises(BadInput) as info:
        parse_plan(to_yaml(data), "p.yaml")
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert "p.yaml: router.sockte: unknown key (did you mean socket?)" in lines


# --- no traceback for any mutation ----------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    st.sampled_from(["48h", "0s", "forever", "5%", "pause", "canary", "nope"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


_EXAMPLE_PATHS = _paths(example_dict())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_EXAMPLE_PATHS), _VALUES), min_size=1, max_size=3))
def test_any_mutated_plan_is_accepted_or_rejected_as_bad_input(
    changes: list[tuple[tuple[Any, ...], Any]],
) -> None:
    """Replacing any fields of the example with junk gives a plan or BadInput, never a crash."""
    data = example_dict()
    for path, value in changes:
        node: Any = data
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced a parent of this path
    try:
        parse_plan(json.dumps(data), SOURCE)  # JSON is YAML, and much faster to write
    except BadInput as exc:
        assert exc.problems
        assert all(p.source == SOURCE and p.message for p in exc.problems)


def test_a_comment_only_file_says_it_holds_no_document() -> None:
    """A file of comments alone is reported as holding no plan, not as a Python type."""
    (problem,) = problems_in("# TODO: write the plan\n")
    assert "holds no YAML document" in problem.message


def test_an_alias_bomb_is_refused_quickly() -> None:
    """Nested YAML aliases that expand past 100,000 nodes are bad input, found before validation."""
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefg", "bcdefgh", strict=True):
        levels.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    (problem,) = problems_in("\n".join(levels) + "\n")
    assert "aliases expand the document" in problem.message


def test_aliases_of_modest_size_are_allowed() -> None:
    """Anchors that repeat a value (the canary steps' bake) are a normal YAML convenience
    and still load."""
    text = EXAMPLE_PATH.read_text()
    assert text.count("bake: 48h\n") == 2
    text = text.replace("bake: 48h\n", "bake: &canary_bake 48h\n", 1)
    text = text.replace("bake: 48h\n", "bake: *canary_bake\n", 1)
    loaded = parse_plan(text, SOURCE)
    assert loaded.plan.steps[2].hold_for() == loaded.plan.steps[1].hold_for()
    assert loaded.content_hash == load_plan(EXAMPLE_PATH).content_hash


def test_a_plan_dumped_as_json_loads_again_with_the_same_hash() -> None:
    """Durations are written in the plan's notation ('2d'), so a dumped plan round-trips."""
    loaded = load_plan(EXAMPLE_PATH)
    dumped = yaml.safe_dump(loaded.plan.model_dump(mode="json"))
    assert "bake: 2d" in dumped and "trigger_interval: 5s" in dumped
    again = parse_plan(dumped, SOURCE)
    assert again.plan == loaded.plan
    assert again.content_hash == loaded.content_hash


# --- gates where their pool serves no traffic ---------------------------------------------


def test_a_gate_comparing_with_stable_is_refused_on_a_100_percent_step() -> None:
    """At 100% stable serves nothing: a canary-vs-stable step gate could never pass."""
    data = small_dict()
    data["gates"]["not_worse"] = {"kind": "compare", "signal": "escalations"}
    data["steps"][3]["gates"] = ["not_worse"]
    (problem,) = problems_of(data)
    assert problem.field == "steps[4].gates[0]"
    assert "'not_worse' cannot apply here" in problem.message
    assert "stable serves no live requests at 100%" in problem.message


def test_live_canary_gates_are_refused_on_a_shadow_step_without_mirroring() -> None:
    """Without mirroring the canary sees no requests at 0%; an event gate (restarts) and the
    same gate at a mirrored shadow are fine."""
    data = small_dict()
    data["steps"][0] = {"kind": "shadow", "mirror": False, "gates": ["healthy", "crash"]}
    (problem,) = problems_of(data)
    assert problem.field == "steps[1].gates[0]"
    assert "the canary serves no live requests at 0% without mirroring" in problem.message
    data["steps"][0]["mirror"] = True
    assert plan_of(data).steps[0].gates == ["healthy", "crash"]


def test_a_stable_threshold_is_refused_at_100_percent() -> None:
    """A threshold on the stable pool cannot be judged once stable takes nothing."""
    data = small_dict()
    data["gates"]["stable_ok"] = {
        "kind": "threshold",
        "signal": "error_rate",
        "pool": "stable",
        "max": 0.01,
    }
    data["steps"][4]["gates"] = ["healthy", "stable_ok"]
    (problem,) = problems_of(data)
    assert problem.field == "steps[5].gates[1]"


# --- a Prometheus plan's signals, checked against its template file -------------------------


def test_a_prometheus_plan_needs_a_template_file() -> None:
    """Without metrics.templates no gate could be asked: refused at validation."""
    data = example_dict()
    del data["metrics"]["templates"]
    (problem,) = problems_of(data)
    assert problem.field == "metrics.templates"
    assert "vllm, triton-trtllm" in problem.message


def test_a_gate_signal_missing_from_the_templates_is_refused_naming_the_gate() -> None:
    """A typo in a gate's signal is found by `plan validate`, not at the first tick."""
    data = example_dict()
    data["gates"]["queue_timeouts"]["signal"] = "queue_timout_rate"
    (problem,) = problems_of(data)
    assert (problem.source, problem.field) == (SOURCE, "gates.queue_timeouts.signal")
    assert "defines no signal 'queue_timout_rate'" in problem.message
    assert "queue_timeout_rate" in problem.message  # the known signals are listed


def test_a_signal_of_the_wrong_kind_for_its_gate_is_refused() -> None:
    """An events gate reads counts; a latency quantile there would count seconds as OOMs."""
    data = example_dict()
    data["gates"]["canary_oom"]["signal"] = "e2e_latency"
    data["gates"]["escalations_not_rising"]["signal"] = "escalation_rate"
    problems = {p.field: p.message for p in problems_of(data)}
    assert "a events gate reads count or events signals" in problems["gates.canary_oom.signal"]
    assert "is a quantile" in problems["gates.canary_oom.signal"]
    assert "is a ratio" in problems["gates.escalations_not_rising.signal"]


def test_an_override_of_an_unknown_signal_names_the_plan_and_field() -> None:
    """Overrides keep the file's kind, so they must name a signal the file defines."""
    data = example_dict()
    data["metrics"]["overrides"] = {"kv_cache_usag": 'max(x{pool="{pool}"}[{window}])'}
    (problem,) = problems_of(data)
    assert (problem.source, problem.field) == (SOURCE, "metrics.overrides.kv_cache_usag")


def test_a_capacity_gate_needs_its_two_signals_in_the_template_file(tmp_path: Path) -> None:
    """The capacity watch reads sequence_tokens_p99 and kv_cache_usage by name."""
    templates = tmp_path / "mine.yaml"
    templates.write_text(
        "signals:\n"
        "  sequence_tokens_p99:\n"
        "    kind: gauge\n"
        '    query: max(tokens{pool="{pool}"})\n',
        encoding="utf-8",
    )
    data = example_dict()
    data["metrics"]["templates"] = str(templates)
    data["gates"] = {"capacity_assumption": data["gates"]["capacity_assumption"]}
    data["steps"] = [{"kind": "full"}, {"kind": "steady", "gates": ["capacity_assumption"]}]
    data["rollback"] = {"triggers": []}
    messages = [p.message for p in problems_of(data)]
    assert any("'sequence_tokens_p99' (a quantile)" in m and "as a gauge" in m for m in messages)
    assert any("'kv_cache_usage' (a gauge)" in m and "does not define" in m for m in messages)


# --- missing data -----------------------------------------------------------------------------


def test_a_gate_without_on_no_data_follows_the_plan_limit() -> None:
    """``on_inconclusive: pause`` makes every gate hold, ``rollback`` roll back, unless the
    gate names its own rule."""
    data = small_dict()
    data["gates"]["fast"]["on_no_data"] = {"rollback_after": "30m"}
    data["gates"]["crash"]["on_no_data"] = "rollback"
    holding = plan_of(data)
    data["limits"]["on_inconclusive"] = "rollback"
    rolling = plan_of(data)
    assert holding.gates["healthy"].no_data(holding.limits) == "hold"
    assert rolling.gates["healthy"].no_data(rolling.limits) == "rollback"
    for plan in (holding, rolling):
        assert plan.gates["crash"].no_data(plan.limits) == "rollback"
        assert plan.gates["fast"].no_data(plan.limits) == RollbackAfter(
            rollback_after=timedelta(minutes=30)
        )


def test_a_step_waits_for_samples_up_to_its_bake_unless_it_says_otherwise() -> None:
    """``max_extension`` defaults to the step's bake; a step may set its own."""
    data = small_dict()
    data["steps"][2]["min_samples"] = {"fast": 500, "healthy": 2000}
    plan = plan_of(data)
    assert plan.steps[2].min_samples == {"fast": 500, "healthy": 2000}
    assert plan.steps[2].extension() == timedelta(hours=2)
    data["steps"][2]["max_extension"] = "30m"
    assert plan_of(data).steps[2].extension() == timedelta(minutes=30)


def test_an_events_gate_cannot_be_asked_for_samples() -> None:
    """An events gate counts OOMs, not samples: a step may not wait for its samples."""
    data = small_dict()
    data["steps"][2]["gates"].append("crash")
    data["steps"][2]["min_samples"] = {"crash": 10}
    (problem,) = problems_of(data)
    assert problem.field == "steps[3].min_samples.crash"
    assert "counts events, not samples" in problem.message


def test_on_no_data_and_min_samples_survive_a_dump_and_reload() -> None:
    """A plan with every spelling of ``on_no_data`` and a step's ``min_samples`` dumps as JSON
    and loads again with the same hash."""
    data = small_dict()
    data["gates"]["healthy"]["on_no_data"] = "hold"
    data["gates"]["crash"]["on_no_data"] = "rollback"
    data["gates"]["fast"]["on_no_data"] = {"rollback_after": "1h30m"}
    data["steps"][2].update(min_samples={"fast": 500}, max_extension="1h")
    loaded = parse_plan(to_yaml(data))
    again = parse_plan(json.dumps(loaded.plan.model_dump(mode="json")))
    assert again.plan == loaded.plan
    assert again.content_hash == loaded.content_hash


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.20.0.14:99999", "not a valid URL (Port out of range 0-65535)"),
        ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("http://10.20.0.14:0", "port 0 cannot be connected to"),
        ("http://:8000", "the URL names no host"),
    ],
)
def test_a_url_the_daemon_could_not_connect_to_is_a_problem_of_the_plan(
    url: str, message: str
) -> None:
    """Replica, Prometheus and suite endpoints are checked as URLs when the plan is read: a
    port past 65535 or a broken IPv6 host names the field, never an error at the first tick."""
    for path, field in (
        (("pools", "canary", "replicas", 0, "url"), "pools.canary.replicas[0].url"),
        (("metrics", "url"), "metrics.url"),
        # A gate's problems name its kind, as pydantic's tagged union does.
        (
            ("gates", "tool_args_no_regression", "endpoint"),
            "gates.tool_args_no_regression.suite.endpoint",
        ),
    ):
        data = example_dict()
        where: Any = data
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = url
        with pytest.raises(BadInput) as raised:
            parse_plan(yaml.safe_dump(data), "plan.yaml")
        assert Problem("plan.yaml", field, message) in raised.value.problems, path


def test_a_plan_waits_on_the_network_unless_its_router_metrics_and_executor_are_local(
    tmp_path: Path,
) -> None:
    """A file router and metrics file with no executor reach nothing over the network (the
    daemon ticks such rollouts in one thread); a Prometheus, an HAProxy socket or an
    executor each may."""
    from tests.plans import file_plan

    local = file_plan("local", tmp_path / "weights.json", tmp_path / "metrics.json")
    assert not plan_of(local).waits_on_network
    prometheus = {
        **local,
        "metrics": {"source": "prometheus", "url": "http://127.0.0.1:9090", "templates": "vllm"},
    }
    assert plan_of(prometheus).waits_on_network
    executor = {**local, "executor": {"kind": "command", "argv": ["/bin/true"]}}
    assert plan_of(executor).waits_on_network
    assert example_plan().waits_on_network  # HAProxy and Prometheus
