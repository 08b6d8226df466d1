"""The agent gateway contract: the reference exporter's series, what counts, the bucket rules,
and that the simulator and the gate templates speak the same contract."""

from __future__ import annotations

import ast
import math
import re
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rolloutd import gateway
from rolloutd.gateway import (
    CONTRACT,
    COUNTERS,
    DURATION_BUCKETS,
    ERRORS,
    HISTOGRAMS,
    REQUEST_DURATION,
    REQUEST_TOKENS,
    REQUESTS,
    SCHEMA_VIOLATIONS,
    SESSION_MEMORY,
    SESSION_SCHEMA_VIOLATIONS,
    SESSION_TIMEOUTS,
    SESSIONS,
    TIMEOUTS,
    TOKEN_BUCKETS,
    TOOL_CALLS,
    GatewayMetrics,
    MetricSpec,
    latency_bucket_problem,
    token_bucket_problem,
)
from rolloutd.sim import gateway as sim_gateway

ROOT = Path(__file__).resolve().parent.parent


def exposition(registry: CollectorRegistry) -> dict[str, tuple[str, str, list[Sample]]]:
    """The registry's families as parsed from its text exposition: name -> (type, HELP, samples)."""
    text = generate_latest(registry).decode()
    return {
        family.name: (family.type, family.documentation, family.samples)
        for family in text_string_to_metric_families(text)
    }


def value(metrics: GatewayMetrics, name: str, pool: str) -> float:
    """One sample's value on ``pool``; fails if the series is absent."""
    found = metrics.registry.get_sample_value(name, {"pool": pool})
    assert found is not None, f"no {name}{{pool={pool!r}}}"
    return found


def counts(metrics: GatewayMetrics, pool: str = "canary") -> dict[str, float]:
    """Every counter of the contract, and each histogram's observation count, on ``pool``."""
    names = [spec.name for spec in COUNTERS] + [f"{spec.name}_count" for spec in HISTOGRAMS]
    return {name: value(metrics, name, pool) for name in names}


def changed(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The series whose value moved, by how much."""
    return {name: after[name] - before[name] for name in after if after[name] != before[name]}


def bucket_bounds(samples: list[Sample], pool: str) -> list[float]:
    """The ``le`` bounds of one pool's ``_bucket`` samples, ascending, ``+Inf`` included."""
    return sorted(
        float(s.labels["le"])
        for s in samples
        if s.name.endswith("_bucket") and s.labels.get("pool") == pool
    )


# --- the exposition ---------------------------------------------------------------------------


def test_every_family_has_the_documented_type_labels_and_help() -> None:
    """The exporter exposes each contract metric with its type, HELP and only the pool label."""
    families = exposition(GatewayMetrics().registry)
    for spec in CONTRACT:
        kind, help_text, samples = families[spec.family]
        assert (kind, help_text) == (spec.kind, spec.help), spec.name
        assert {name for s in samples for name in s.labels if name != "le"} == set(spec.labels)
    extra = set(families) - {spec.family for spec in CONTRACT}
    assert all(name.endswith("_created") and families[name][0] == "gauge" for name in extra)


def test_both_pools_read_zero_before_any_event() -> None:
    """Every counter, histogram count and bucket of stable and canary exists at 0 from the start."""
    metrics = GatewayMetrics()
    for pool in ("stable", "canary"):
        assert set(counts(metrics, pool).values()) == {0.0}
    families = exposition(metrics.registry)
    for spec in HISTOGRAMS:
        samples = families[spec.family][2]
        for pool in ("stable", "canary"):
            assert bucket_bounds(samples, pool) == [*spec.buckets, math.inf]
            assert {s.value for s in samples if s.labels["pool"] == pool} == {0.0}


def test_histograms_use_the_default_buckets_unless_given_others() -> None:
    """Default buckets are the contract's; a gateway may pass its own, used as given."""
    assert REQUEST_DURATION.buckets == DURATION_BUCKETS
    assert REQUEST_TOKENS.buckets == TOKEN_BUCKETS
    metrics = GatewayMetrics(duration_buckets=(1, 2, 45, 90))
    samples = exposition(metrics.registry)[REQUEST_DURATION.name][2]
    assert bucket_bounds(samples, "canary") == [1.0, 2.0, 45.0, 90.0, math.inf]


def test_metrics_register_on_the_registry_given() -> None:
    """A gateway's own registry receives the series; a second exporter on it is refused."""
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    assert metrics.registry is registry
    assert registry.get_sample_value(REQUESTS.name, {"pool": "stable"}) == 0.0
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        GatewayMetrics(registry)


def test_unsorted_or_infinite_buckets_are_refused() -> None:
    """Bucket lists that are unsorted, empty or hold +Inf fail at construction, naming which."""
    with pytest.raises(ValueError, match="duration buckets: buckets must be strictly ascending"):
        GatewayMetrics(duration_buckets=(2, 1))
    with pytest.raises(ValueError, match="token buckets: buckets must be positive and finite"):
        GatewayMetrics(token_buckets=(1, math.inf))
    with pytest.raises(ValueError, match="token buckets: no buckets"):
        GatewayMetrics(token_buckets=())


# --- what counts --------------------------------------------------------------------------------


def test_a_session_and_an_escalation_count_once_on_their_pool() -> None:
    """session_started and escalated each add one to their own counter, on their pool only."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.session_started("canary")
    metrics.escalated("canary")
    assert changed(before, counts(metrics)) == {
        "agent_sessions_total": 1,
        "agent_escalations_total": 1,
    }
    assert set(counts(metrics, "stable").values()) == {0.0}


def test_schema_violations_are_a_subset_of_tool_calls() -> None:
    """A valid tool call counts in tool calls; a violating one in tool calls and violations."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.tool_call("canary", schema_ok=True)
    assert changed(before, counts(metrics)) == {TOOL_CALLS.name: 1}
    metrics.tool_call("canary", schema_ok=False)
    assert changed(before, counts(metrics)) == {TOOL_CALLS.name: 2, SCHEMA_VIOLATIONS.name: 1}


def test_a_timeout_counts_in_requests_and_timeouts_but_not_errors_or_durations() -> None:
    """A timed-out request is a request and a timeout; its duration, if passed, is ignored."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.request_finished(
        "canary", outcome="timeout", duration_s=60.0, prompt_tokens=6000, output_tokens=0
    )
    assert changed(before, counts(metrics)) == {REQUESTS.name: 1, TIMEOUTS.name: 1}


def test_an_error_counts_in_requests_and_errors_but_not_timeouts_or_durations() -> None:
    """A failed request is a request and an error, never a timeout, and observes nothing."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.request_finished("stable", outcome="error", duration_s=0.1)
    assert changed(before, counts(metrics, "stable")) == {REQUESTS.name: 1, ERRORS.name: 1}


def test_an_answered_request_observes_its_duration_and_prompt_plus_output_tokens() -> None:
    """An ok request counts once in requests and lands in one duration and one token bucket."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.request_finished(
        "canary", outcome="ok", duration_s=13.5, prompt_tokens=6000, output_tokens=300
    )
    assert changed(before, counts(metrics)) == {
        REQUESTS.name: 1,
        f"{REQUEST_DURATION.name}_count": 1,
        f"{REQUEST_TOKENS.name}_count": 1,
    }
    duration, tokens = REQUEST_DURATION.name, REQUEST_TOKENS.name
    assert value(metrics, f"{duration}_sum", "canary") == 13.5
    assert value(metrics, f"{tokens}_sum", "canary") == 6300
    bucket = metrics.registry.get_sample_value
    assert bucket(f"{duration}_bucket", {"pool": "canary", "le": "13.0"}) == 0
    assert bucket(f"{duration}_bucket", {"pool": "canary", "le": "14.0"}) == 1
    assert bucket(f"{tokens}_bucket", {"pool": "canary", "le": "6144.0"}) == 0
    assert bucket(f"{tokens}_bucket", {"pool": "canary", "le": "6656.0"}) == 1


def test_an_answer_without_usage_observes_only_its_duration() -> None:
    """Without both token counts an answered request skips the token histogram."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.request_finished("canary", outcome="ok", duration_s=2.0, prompt_tokens=6000)
    assert changed(before, counts(metrics)) == {
        REQUESTS.name: 1,
        f"{REQUEST_DURATION.name}_count": 1,
    }


@pytest.mark.parametrize(
    ("pool", "outcome", "duration", "message"),
    [
        ("Canary", "ok", 1.0, "unknown pool 'Canary'"),
        ("canary", "cancelled", 1.0, "unknown outcome 'cancelled'"),
        ("canary", "ok", None, "needs its duration_s"),
        ("canary", "ok", -1.0, "cannot be negative"),
    ],
)
def test_a_bad_call_raises_and_counts_nothing(
    pool: str, outcome: gateway.Outcome, duration: float | None, message: str
) -> None:
    """A misspelt pool or outcome, or an answer without a valid duration, changes no series."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    with pytest.raises(ValueError, match=message):
        metrics.request_finished(pool, outcome=outcome, duration_s=duration)
    assert counts(metrics) == before


def test_a_request_no_pool_answered_counts_under_unknown() -> None:
    """The unknown pool is accepted, created on first use only, and leaves both pools alone."""
    metrics = GatewayMetrics()
    assert metrics.registry.get_sample_value(REQUESTS.name, {"pool": "unknown"}) is None
    metrics.request_finished("unknown", outcome="error")
    assert value(metrics, ERRORS.name, "unknown") == 1
    assert value(metrics, ERRORS.name, "canary") == value(metrics, ERRORS.name, "stable") == 0


# --- once per session ----------------------------------------------------------------------------


def session_counts(metrics: GatewayMetrics) -> dict[tuple[str, str], float]:
    """The two once-per-session counters on both pools: (short name, pool) -> value."""
    return {
        (short, pool): value(metrics, spec.name, pool)
        for short, spec in (
            ("timeouts", SESSION_TIMEOUTS),
            ("violations", SESSION_SCHEMA_VIOLATIONS),
        )
        for pool in ("stable", "canary")
    }


def test_the_session_series_exist_at_zero_on_both_pools_from_the_start() -> None:
    """A fresh exporter has both once-per-session counters on stable and canary, at 0."""
    metrics = GatewayMetrics()
    assert set(session_counts(metrics).values()) == {0.0}
    assert {SESSION_TIMEOUTS, SESSION_SCHEMA_VIOLATIONS} <= set(COUNTERS)


def test_a_session_with_three_timeouts_counts_once() -> None:
    """Three timed-out requests of one session are three timeouts and one session timeout."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.session_started("canary", session="s-1")
    for _ in range(3):
        metrics.request_finished("canary", outcome="timeout", session="s-1")
    assert changed(before, counts(metrics)) == {
        SESSIONS.name: 1,
        REQUESTS.name: 3,
        TIMEOUTS.name: 3,
        SESSION_TIMEOUTS.name: 1,
    }


def test_a_session_with_several_violating_tool_calls_counts_once() -> None:
    """Violating tool calls each count as violations; their session counts once."""
    metrics = GatewayMetrics()
    before = counts(metrics)
    metrics.session_started("canary", session="s-1")
    for schema_ok in (True, False, False, True, False):
        metrics.tool_call("canary", schema_ok=schema_ok, session="s-1")
    assert changed(before, counts(metrics)) == {
        SESSIONS.name: 1,
        TOOL_CALLS.name: 5,
        SCHEMA_VIOLATIONS.name: 3,
        SESSION_SCHEMA_VIOLATIONS.name: 1,
    }


def test_a_moved_session_counts_on_its_first_pool() -> None:
    """A session started on stable whose later requests the canary answers counts its first
    timeout and first violation on stable, while the requests themselves count on canary."""
    metrics = GatewayMetrics()
    metrics.session_started("stable", session="s-1")
    metrics.request_finished("stable", outcome="ok", duration_s=1.0, session="s-1")
    metrics.request_finished("canary", outcome="timeout", session="s-1")
    metrics.tool_call("canary", schema_ok=False, session="s-1")
    assert session_counts(metrics) == {
        ("timeouts", "stable"): 1,
        ("timeouts", "canary"): 0,
        ("violations", "stable"): 1,
        ("violations", "canary"): 0,
    }
    assert value(metrics, TIMEOUTS.name, "canary") == 1
    assert value(metrics, SCHEMA_VIOLATIONS.name, "canary") == 1


def test_without_session_started_the_first_pool_seen_is_the_sessions() -> None:
    """A session never passed to session_started counts on the pool of its first call."""
    metrics = GatewayMetrics()
    metrics.tool_call("canary", schema_ok=True, session="s-1")
    metrics.request_finished("stable", outcome="timeout", session="s-1")
    assert session_counts(metrics)[("timeouts", "canary")] == 1
    assert session_counts(metrics)[("timeouts", "stable")] == 0


def test_calls_without_a_session_never_count_the_session_series() -> None:
    """Without session= timeouts and violations count per request, and sessions not at all."""
    metrics = GatewayMetrics()
    metrics.session_started("canary")
    metrics.request_finished("canary", outcome="timeout")
    metrics.tool_call("canary", schema_ok=False)
    assert value(metrics, TIMEOUTS.name, "canary") == 1
    assert value(metrics, SCHEMA_VIOLATIONS.name, "canary") == 1
    assert set(session_counts(metrics).values()) == {0.0}


def test_sessions_are_counted_apart() -> None:
    """Two sessions that each time out count two session timeouts, each on its own pool."""
    metrics = GatewayMetrics()
    metrics.session_started("stable", session="s-1")
    metrics.session_started("canary", session="s-2")
    for session in ("s-1", "s-2", "s-1", "s-2"):
        metrics.request_finished("canary", outcome="timeout", session=session)
    assert session_counts(metrics)[("timeouts", "stable")] == 1
    assert session_counts(metrics)[("timeouts", "canary")] == 1


def test_the_session_memory_forgets_the_least_recently_used_beyond_its_bound() -> None:
    """With room for two sessions, a third forgets the one used least recently, which alone
    can then count again; the default bound is 100,000 sessions."""
    assert SESSION_MEMORY == 100_000
    assert GatewayMetrics().max_sessions == SESSION_MEMORY
    metrics = GatewayMetrics(max_sessions=2)
    for session in ("old", "kept"):
        metrics.request_finished("stable", outcome="timeout", session=session)
    metrics.request_finished("stable", outcome="timeout", session="old")  # now the newest
    metrics.request_finished("stable", outcome="timeout", session="third")  # forgets "kept"
    assert value(metrics, SESSION_TIMEOUTS.name, "stable") == 3
    metrics.request_finished("stable", outcome="timeout", session="old")
    assert value(metrics, SESSION_TIMEOUTS.name, "stable") == 3
    metrics.request_finished("stable", outcome="timeout", session="kept")
    assert value(metrics, SESSION_TIMEOUTS.name, "stable") == 4


def test_a_session_memory_below_one_is_refused() -> None:
    """max_sessions=0 would forget every session at once, so it is refused."""
    with pytest.raises(ValueError, match="max_sessions must be at least 1"):
        GatewayMetrics(max_sessions=0)


def test_a_bad_call_with_a_session_remembers_nothing() -> None:
    """A refused call neither counts the session nor makes its pool the session's first."""
    metrics = GatewayMetrics()
    with pytest.raises(ValueError, match="needs its duration_s"):
        metrics.request_finished("canary", outcome="ok", session="s-1")
    metrics.request_finished("stable", outcome="timeout", session="s-1")
    assert session_counts(metrics)[("timeouts", "stable")] == 1


def test_serve_exports_the_registry_over_http_until_closed() -> None:
    """serve() answers GET /metrics with the contract's series; close() stops it."""
    metrics = GatewayMetrics()
    metrics.session_started("stable")
    url = metrics.serve(0)
    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    finally:
        metrics.close()
    assert 'agent_sessions_total{pool="stable"} 1.0' in text
    assert 'agent_sessions_total{pool="canary"} 0.0' in text
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/metrics", timeout=1)
    metrics.close()


# --- bucket rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [1, 2, 5, 14, 16, 18, 20, 25, 30, 40, 60])
def test_default_duration_buckets_judge_targets_on_their_edges(target: float) -> None:
    """A target on a default edge from 1 s to 60 s has no bucket problem."""
    assert latency_bucket_problem(DURATION_BUCKETS, target) is None


def test_a_target_far_from_an_edge_or_past_the_buckets_is_named() -> None:
    """Targets with no edge, a distant edge or no room above them each get their reason."""
    assert "no bucket at or above the target 121s" in (
        latency_bucket_problem(DURATION_BUCKETS, 121) or ""
    )
    distant = latency_bucket_problem(DURATION_BUCKETS, 45) or ""
    assert "is 60s, more than 25% above it" in distant
    assert distant.endswith("add an edge at 45")
    assert latency_bucket_problem(DURATION_BUCKETS, 45, max_gap=0.5) is None
    assert "below 2x the target 90s" in (latency_bucket_problem(DURATION_BUCKETS, 90) or "")
    assert latency_bucket_problem((1, 2, 3), 3, headroom=1.0) is None


def test_token_buckets_must_reach_max_seq_len() -> None:
    """Default token buckets reach 131,072 tokens; one token further is named as a problem."""
    assert token_bucket_problem(TOKEN_BUCKETS, 8192) is None
    assert token_bucket_problem(TOKEN_BUCKETS, 131_072) is None
    assert "below max_seq_len 131073" in (token_bucket_problem(TOKEN_BUCKETS, 131_073) or "")
    assert "below max_seq_len 8192" in (token_bucket_problem((1000, 5000), 8192) or "")


def test_malformed_bucket_lists_are_named_before_any_rule() -> None:
    """Empty, unsorted or non-positive bucket lists say so instead of a rule's verdict."""
    assert latency_bucket_problem((), 1.0) == "no buckets"
    assert token_bucket_problem((8192, 4096), 4096) == "buckets must be strictly ascending"
    assert "positive" in (latency_bucket_problem((0, 1), 1.0) or "")


# --- one contract everywhere --------------------------------------------------------------------


def test_the_simulator_exports_the_contract_families() -> None:
    """The simulated gateway's families have the contract's names, types, HELP, labels, buckets."""
    simulated = sim_gateway.AgentMetrics()
    for pool in ("stable", "canary"):
        for counter in sim_gateway.COUNTERS:
            simulated.add(pool, counter)
        for histogram in sim_gateway.HISTOGRAMS:
            simulated.observe(pool, histogram, 1.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(simulated)
    families = exposition(registry)
    reference = exposition(GatewayMetrics().registry)
    assert set(families) == {spec.family for spec in CONTRACT}
    for spec in CONTRACT:
        kind, help_text, samples = families[spec.family]
        assert (kind, help_text) == (spec.kind, spec.help), spec.name
        assert {s.name for s in samples} == {s.name for s in reference[spec.family][2]}
        assert {name for s in samples for name in s.labels if name != "le"} == set(spec.labels)
        if spec.kind == "histogram":
            assert bucket_bounds(samples, "canary") == [*spec.buckets, math.inf]


def test_the_simulator_keys_are_the_contract_names() -> None:
    """The simulator's short names map one-to-one, in order, onto the contract's metrics."""
    assert [f"agent_{key}_total" for key in sim_gateway.COUNTERS] == [s.name for s in COUNTERS]
    assert {f"agent_{key}": bounds for key, bounds in sim_gateway.HISTOGRAMS.items()} == {
        spec.name: spec.buckets for spec in HISTOGRAMS
    }


def test_the_gate_templates_select_only_contract_series() -> None:
    """Every agent_* series in gates/*.yaml is a contract counter or a histogram's series."""
    allowed = {spec.name for spec in COUNTERS} | {
        f"{spec.name}_{suffix}" for spec in HISTOGRAMS for suffix in ("bucket", "count", "sum")
    }
    used: set[str] = set()
    for path in sorted((ROOT / "gates").glob("*.yaml")):
        used |= set(re.findall(r"\bagent_\w+", path.read_text()))
    assert used
    assert used <= allowed, used - allowed
    assert {f"{spec.name}_bucket" for spec in HISTOGRAMS} <= used


def test_the_readme_table_documents_every_contract_metric() -> None:
    """gates/README.md has a row per contract metric with its type, HELP and what counts."""
    readme = (ROOT / "gates" / "README.md").read_text()
    section = readme[readme.index("## The agent gateway contract") :]
    for spec in CONTRACT:
        row = f"| `{spec.name}` | {spec.kind} | {spec.help} | {spec.counts} |"
        assert row in section, spec.name


def test_the_module_can_be_vendored_alone() -> None:
    """rolloutd/gateway.py imports only the standard library and prometheus_client."""
    tree = ast.parse((ROOT / "rolloutd" / "gateway.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    roots = {name.split(".")[0] for name in imported}
    assert roots - set(sys.stdlib_module_names) == {"prometheus_client"}


def test_metric_specs_are_frozen() -> None:
    """A contract entry cannot be changed at run time by an importer."""
    with pytest.raises(AttributeError):
        REQUESTS.help = "something else"  # type: ignore[misc]
    assert isinstance(REQUESTS, MetricSpec)
