"""Signal templates: escaping, window checks, validation with file and field, overrides,
and the two template files shipped in gates/."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from rolloutd.core.plan import CapacityGate
from rolloutd.errors import BadInput
from rolloutd.metrics.templates import (
    GATES_DIR,
    Labels,
    escape_label_value,
    load_templates,
    parse_templates,
    promql_duration,
    render,
    template_problems,
    window_seconds,
)
from tests.plans import example_plan

HOSTILE = 'canary"} or vector(1) or {x="'
TEMPLATE = 'sum(increase(agent_tool_calls_total{{pool_label}="{pool}"}[{window}]))'
SHIPPED = ("vllm", "vllm-v0", "triton-trtllm", "triton-trtllm-legacy")


def _string_at(text: str, start: int) -> tuple[str, int]:
    """Read a double-quoted PromQL string opening at ``start``: its value and end index."""
    assert text[start] == '"'
    i = start + 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return json.loads(text[start : i + 1]), i + 1


def test_a_hostile_pool_value_stays_inside_its_label_string() -> None:
    """A pool that tries to close the matcher and append ``or vector(1)`` is one label value."""
    query = render(TEMPLATE, pool=HOSTILE, window="30s", pool_label="pool")
    opening = query.index('pool="') + len("pool=")
    value, end = _string_at(query, opening)
    assert value == HOSTILE
    assert query[end:] == "}[30s]))"
    assert query[:opening] == "sum(increase(agent_tool_calls_total{pool="


@pytest.mark.parametrize("value", ["a\\", 'a\\"b', "line\nbreak", "{window}", "{pool_label}"])
def test_backslashes_quotes_and_placeholder_text_in_a_value_round_trip(value: str) -> None:
    """Escaping is reversible and the substituted text is never substituted again."""
    query = render('x{p="{pool}"}[{window}]', pool=value, window="1m", pool_label="pool")
    parsed, end = _string_at(query, query.index('"'))
    assert parsed == value
    assert query[end:] == "}[1m]"
    assert escape_label_value(value).count('"') == escape_label_value(value).count('\\"')


@pytest.mark.parametrize(
    ("window", "text"),
    [
        (timedelta(seconds=30), "30s"),
        (timedelta(seconds=90), "90s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(hours=2), "2h"),
        (timedelta(days=7), "7d"),
        (timedelta(milliseconds=1500), "1500ms"),
        (timedelta(seconds=1.2344), "1234ms"),
        ("30s", "30s"),
        ("2w", "2w"),
        ("1y", "1y"),
    ],
)
def test_windows_become_promql_durations_of_one_unit(window: timedelta | str, text: str) -> None:
    """Timedeltas take the largest unit that divides them; valid text passes unchanged."""
    assert promql_duration(window) == text
    assert re.fullmatch(r"\d+(ms|s|m|h|d|w|y)", promql_duration(window))


@pytest.mark.parametrize(
    ("window", "seconds"),
    [(timedelta(minutes=5), "300"), ("1500ms", "1.5"), ("2h", "7200"), ("1y", "31536000")],
)
def test_window_seconds_is_the_window_as_a_plain_number(
    window: timedelta | str, seconds: str
) -> None:
    """``{window_seconds}`` is the window PromQL reads from ``{window}``, in seconds, without
    an exponent; it is a known placeholder, not a typo."""
    template = 'x{pool="{pool}"}[{window}] and t{pool="{pool}"} < {window_seconds}'
    assert template_problems(template) == []
    rendered = render(template, pool="canary", window=window)
    assert rendered.endswith(f"< {seconds}")
    assert window_seconds(window) == float(seconds)


@pytest.mark.parametrize(
    "window",
    [
        timedelta(0),
        timedelta(seconds=-5),
        timedelta(microseconds=400),
        "30",
        "1h30m",
        "5 m",
        "-5m",
        "30s] or vector(1) [",
        "",
        "30S",
    ],
)
def test_anything_else_is_refused_as_a_window(window: timedelta | str) -> None:
    """Zero, negative, sub-millisecond, compound or decorated windows raise ValueError."""
    with pytest.raises(ValueError, match="window"):
        render(TEMPLATE, pool="canary", window=window, pool_label="pool")


@pytest.mark.parametrize("label", ['pool"} or vector(1) or {x', "1pool", "po-ol", ""])
def test_a_pool_label_that_is_not_a_label_name_is_refused(label: str) -> None:
    """The label name cannot be quoted in PromQL, so it is validated instead."""
    with pytest.raises(ValueError, match="pool_label"):
        render(TEMPLATE, pool="canary", window="30s", pool_label=label)


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ('x{pool="{pol}"}[{window}]', "unknown placeholder {pol}"),
        ('x{pool="{ pool }"}[{window}]', "unknown placeholder { pool }"),
        ("sum(x[{window}])", "must select the pool"),
        ('x{pool=~"{pool}"}[{window}]', "must stand alone"),
        ("x{pool={pool}}[{window}]", "must stand alone"),
        ('x{pool="{pool}", w="{window}"}', "range selector"),
    ],
)
def test_template_mistakes_are_named(template: str, problem: str) -> None:
    """Typos, unselected pools, regex matchers and stray windows are found before any query."""
    assert any(problem in found for found in template_problems(template))


def test_a_good_template_has_no_problems() -> None:
    """Placeholders used as intended pass, subqueries included."""
    assert template_problems(TEMPLATE) == []
    assert template_problems('max_over_time(x{pool="{pool}"}[{window}:1s])') == []


def _file(signals: dict[str, object]) -> str:
    return yaml.safe_dump({"signals": signals})


@pytest.mark.parametrize(
    ("signal", "field", "message"),
    [
        ({"kind": "ratio", "query": TEMPLATE}, "signals.bad", "needs 'samples'"),
        (
            {"kind": "quantile", "query": TEMPLATE, "samples": TEMPLATE},
            "signals.bad",
            "needs 'q'",
        ),
        (
            {
                "kind": "quantile",
                "q": 0.99,
                "query": 'histogram_quantile(0.95, x{p="{pool}"})',
                "samples": TEMPLATE,
            },
            "signals.bad",
            "the query computes 0.95",
        ),
        ({"kind": "gauge", "query": TEMPLATE, "q": 0.5}, "signals.bad", "quantile signals only"),
        ({"kind": "median", "query": TEMPLATE}, "signals.bad.kind", "ratio"),
        ({"kind": "gauge", "query": TEMPLATE, "extra": 1}, "signals.bad.extra", "xtra"),
        ({"kind": "gauge", "query": 'x{p="{pol}"}'}, "signals.bad.query", "{pol}"),
        (
            {"kind": "events", "query": TEMPLATE, "samples": "sum(x[{window}])"},
            "signals.bad.samples",
            "must select the pool",
        ),
    ],
)
def test_a_bad_signal_is_reported_with_file_and_field(
    signal: dict[str, object], field: str, message: str
) -> None:
    """Each problem names the template file and the field the operator must fix."""
    with pytest.raises(BadInput) as caught:
        parse_templates(
            _file({"good": {"kind": "gauge", "query": TEMPLATE}, "bad": signal}), "t.yaml"
        )
    problems = caught.value.problems
    assert any(p.source == "t.yaml" and p.field == field for p in problems), problems
    assert message in str(caught.value)


@pytest.mark.parametrize("text", ["", "- a list", "signals: {}", "signals: [", "other: 1"])
def test_a_file_that_is_not_a_template_file_is_refused(text: str) -> None:
    """Empty, non-mapping, signal-less or broken YAML is bad input naming the file."""
    with pytest.raises(BadInput, match=r"^t\.yaml"):
        parse_templates(text, "t.yaml")


def test_a_named_file_comes_from_gates_and_a_path_from_anywhere(tmp_path: Path) -> None:
    """``triton-trtllm`` is gates/triton-trtllm.yaml; a path is read where it points."""
    assert load_templates("triton-trtllm").source == str(GATES_DIR / "triton-trtllm.yaml")
    own = tmp_path / "ours.yaml"
    own.write_text(_file({"queue_depth": {"kind": "gauge", "query": 'max(q{pool="{pool}"})'}}))
    assert set(load_templates(str(own)).signals) == {"queue_depth"}


def test_an_unknown_name_lists_the_files_there_are() -> None:
    """A typo in ``metrics.templates`` says which names exist."""
    with pytest.raises(BadInput, match="no such template file") as caught:
        load_templates("trition")
    assert "triton-trtllm" in str(caught.value)
    assert "vllm" in str(caught.value)


def test_an_override_replaces_the_query_and_keeps_kind_and_samples() -> None:
    """A plan's override swaps only the query text of a signal the file defines."""
    templates = load_templates("vllm")
    custom = 'sum(increase(my_timeouts_total{pool="{pool}"}[{window}])) / 100'
    overridden = templates.with_overrides({"queue_timeout_rate": custom})
    signal = overridden.signals["queue_timeout_rate"]
    assert signal.query == custom
    assert signal.kind == templates.signals["queue_timeout_rate"].kind == "ratio"
    assert signal.samples == templates.signals["queue_timeout_rate"].samples
    assert templates.signals["queue_timeout_rate"].query != custom  # the original is untouched


def test_overriding_an_undefined_signal_or_with_a_broken_template_is_bad_input() -> None:
    """The override names its plan field; its kind would be unknown, or its text is wrong."""
    templates = load_templates("vllm")
    with pytest.raises(BadInput) as caught:
        templates.with_overrides(
            {"nope": 'x{pool="{pool}"}', "error_rate": "sum(x[{window}])"}, where="p.yaml"
        )
    fields = {p.field for p in caught.value.problems}
    assert fields == {"metrics.overrides.nope", "metrics.overrides.error_rate"}
    assert all(p.source == "p.yaml" for p in caught.value.problems)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_files_load_and_every_query_renders(name: str) -> None:
    """Every file validates, and each query renders for both pools without a placeholder left."""
    templates = load_templates(name)
    labels = Labels(model="ensemble")
    for signal in templates.signals.values():
        for query in signal.queries().values():
            for pool in ("canary", "stable"):
                rendered = render(query, pool=pool, window=timedelta(seconds=30), labels=labels)
                assert not re.search(
                    r"\{(pool|pool_label|gateway_pool_label|model|window)\}", rendered
                )
                assert rendered.count("(") == rendered.count(")")


GATEWAY_SIGNALS = (
    "schema_violation_rate",
    "schema_violations",
    "escalation_rate",
    "escalations",
    "session_timeout_rate",
    "session_timeouts",
    "session_schema_violation_rate",
    "session_schema_violations",
)


def test_every_file_defines_the_same_signals_and_the_same_gateway_queries() -> None:
    """A plan can switch stacks (or engine versions) without renaming signals; agent
    counters, the once-per-session ones included, are stack-neutral."""
    first, *others = (load_templates(name).signals for name in SHIPPED)
    assert set(GATEWAY_SIGNALS) <= set(first)
    for other in others:
        assert set(first) == set(other)
        for name in GATEWAY_SIGNALS:
            assert first[name] == other[name]
            assert "agent_" in first[name].query


@pytest.mark.parametrize(
    ("signal", "like", "counter"),
    [
        ("session_timeouts", "escalations", "agent_session_timeouts_total"),
        ("session_timeout_rate", "escalation_rate", "agent_session_timeouts_total"),
        (
            "session_schema_violations",
            "escalations",
            "agent_session_schema_violations_total",
        ),
        (
            "session_schema_violation_rate",
            "escalation_rate",
            "agent_session_schema_violations_total",
        ),
    ],
)
def test_the_session_signals_count_sessions_over_sessions_started(
    signal: str, like: str, counter: str
) -> None:
    """Each once-per-session signal has its escalation twin's kind and exposure (sessions
    started), and counts its own gateway counter where the twin counts escalations."""
    signals = load_templates("vllm").signals
    ours, twin = signals[signal], signals[like]
    assert ours.kind == twin.kind
    assert ours.samples == twin.samples
    assert ours.query == twin.query.replace("agent_escalations_total", counter)


@pytest.mark.parametrize("name", SHIPPED)
def test_no_shipped_query_falls_back_to_zero(name: str) -> None:
    """Absent is not zero: no query of a shipped file turns a missing series into 0."""
    for signal in load_templates(name).signals.values():
        for query in signal.queries().values():
            assert "vector(0)" not in query


@pytest.mark.parametrize("name", SHIPPED)
def test_every_file_says_which_engine_versions_it_was_checked_on(name: str) -> None:
    """Each file names the engine versions it was checked on, and a signal's missing_on
    names only those."""
    templates = load_templates(name)
    assert templates.checked_on
    for signal in templates.signals.values():
        assert set(signal.missing_on) <= set(templates.checked_on)


def test_every_signal_of_the_reference_plan_is_in_the_triton_file() -> None:
    """The atlas-70b plan (Triton/TensorRT-LLM) finds every signal it names, and its kind
    suits the gate: counts for events, exposure for comparisons, the capacity pair."""
    plan = example_plan()
    assert plan.metrics.templates == "triton-trtllm"
    signals = load_templates("triton-trtllm").signals
    for name, gate in plan.gates.items():
        if isinstance(gate, CapacityGate):
            assert signals["sequence_tokens_p99"].kind == "quantile"
            assert signals["kv_cache_usage"].kind == "gauge"
            continue
        signal = getattr(gate, "signal", None)
        if signal is None:
            continue  # suite gates run the tool-argument suite, not a query
        assert signal in signals, f"gate {name} uses {signal}"
        expected = {"events": {"count", "events"}, "compare": {"events"}}.get(gate.kind)
        if expected:
            assert signals[signal].kind in expected, name


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("signals: {a: 2025-13-45}\n", "holds a value that cannot be read: month must be"),
        ("[" * 100_000, "is nested too deeply to read"),
        ("signals:\x00\n", "is a binary file; expected a YAML template file"),
    ],
)
def test_a_template_file_that_cannot_be_read_is_bad_input_naming_it(
    tmp_path: Path, content: str, message: str
) -> None:
    """A value no type holds, thousands of '[' and a binary file are each one problem with
    the file, not a crash."""
    path = tmp_path / "templates.yaml"
    path.write_text(content)
    with pytest.raises(BadInput) as raised:
        load_templates(str(path))
    assert str(raised.value).startswith(f"{path}: {message}")


def test_a_template_file_on_a_device_is_read_only_to_the_limit() -> None:
    """/dev/zero never ends: reading stops one byte past the limit."""
    with pytest.raises(BadInput, match="holds more than"):
        load_templates("/dev/zero")
