"""Quality profiles, scored field by field on a fixed set of cases over real HTTP."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from rolloutd.sim.cases import Case, generate_cases, schema_of, tool_definitions
from rolloutd.sim.engine import Replica
from rolloutd.sim.profiles import Profile
from rolloutd.sim.scoring import CallScore, compare_field, score_call

CASES = generate_cases(150, seed=7)


def run_cases(replica: Replica, cases: list[Case]) -> list[tuple[Case, CallScore, str]]:
    """Ask the replica every case; score each answer against the expected call."""
    scored = []
    with httpx.Client(base_url=replica.url, timeout=30) as client:
        for case in cases:
            body = {
                "messages": [{"role": "user", "content": case.message}],
                "tools": tool_definitions(),
                "rolloutd_expected": case.expected(),
                "rolloutd_prompt_tokens": 2000,
            }
            response = client.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text
            function = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]
            score = score_call(
                case.tool,
                case.arguments,
                function["name"],
                function["arguments"],
                schema_of(case.tool),
            )
            scored.append((case, score, function["arguments"]))
    return scored


@pytest.fixture
def replica(request: pytest.FixtureRequest) -> Iterator[Replica]:
    """A paged 8,192 replica with the profile named by the test's parameter."""
    profile: Profile = getattr(request, "param", "exact")
    with Replica("q", profile=profile, time_scale=1e-5) as started:
        yield started


@pytest.mark.parametrize("replica", ["exact"], indirect=True)
def test_exact_profile_answers_every_case_exactly(replica: Replica) -> None:
    """The exact profile calls the right tool with exactly the expected arguments."""
    scored = run_cases(replica, CASES)
    assert all(score.exact and score.schema_valid for _, score, _ in scored)


@pytest.mark.parametrize("replica", ["int4-like"], indirect=True)
def test_int4_like_is_mostly_format_noise_with_a_few_value_errors(replica: Replica) -> None:
    """int4-like: keys reordered, format deviations, ~3% of fields with wrong values."""
    scored = run_cases(replica, CASES)
    verdicts: Counter[str] = Counter(v for _, s, _ in scored for v in s.fields.values())
    fields = sum(verdicts.values())
    assert verdicts["format"] > verdicts["value"] > 0
    assert 0.01 <= verdicts["value"] / fields <= 0.06
    assert verdicts["missing"] == verdicts["extra"] == 0
    assert all(score.tool_correct and score.parsed for _, score, _ in scored)
    assert sum(not s.schema_valid for _, s, _ in scored) / len(scored) < 0.05
    assert 0.3 <= sum(s.exact for _, s, _ in scored) / len(scored) <= 0.9
    reordered = sum(list(json.loads(text)) != list(case.arguments) for case, _, text in scored)
    assert reordered > len(scored) / 2


@pytest.mark.parametrize("replica", ["broken-schema"], indirect=True)
def test_broken_schema_violates_the_schema_every_time(replica: Replica) -> None:
    """broken-schema: every call's arguments fail the tool's JSON schema."""
    scored = run_cases(replica, CASES)
    assert not any(score.schema_valid for _, score, _ in scored)
    assert all(score.tool_correct for _, score, _ in scored)


def test_fault_knobs_raise_violations_and_drop_exactness() -> None:
    """Schema-violation rate and exactness drop act on the exact profile in proportion."""
    with Replica("k", time_scale=1e-5) as replica:
        replica.set_faults(schema_violation_rate=0.3, exactness_drop=0.3)
        scored = run_cases(replica, CASES)
    violations = sum(not s.schema_valid for _, s, _ in scored) / len(scored)
    wrong = sum(s.count("value") > 0 for _, s, _ in scored) / len(scored)
    assert 0.18 <= violations <= 0.42
    assert 0.18 <= wrong <= 0.42


def test_answers_are_deterministic_under_a_seed() -> None:
    """The same seed and request give the same answer; another seed gives other noise."""
    cases = CASES[:30]
    with Replica("a", profile="int4-like", seed=1, time_scale=1e-5) as first:
        one = [text for _, _, text in run_cases(first, cases)]
        again = [text for _, _, text in run_cases(first, cases)]
    with Replica("b", profile="int4-like", seed=1, time_scale=1e-5) as twin:
        twin_answers = [text for _, _, text in run_cases(twin, cases)]
    with Replica("c", profile="int4-like", seed=2, time_scale=1e-5) as other:
        other_answers = [text for _, _, text in run_cases(other, cases)]
    assert one == again == twin_answers
    assert one != other_answers


def test_scoring_tells_format_from_value() -> None:
    """ "$1,200.00" for 1200 is a format deviation; 1,320 is a value error."""
    money = {"type": "number"}
    assert compare_field(1200, 1200.0, money) == "exact"
    assert compare_field(1200, "$1,200.00", money) == "format"
    assert compare_field(1200, 1320, money) == "value"
    date = {"type": "string", "format": "date"}
    assert compare_field("2025-03-04", "2025-03-04T00:00:00", date) == "format"
    assert compare_field("2025-03-04", "2025-03-05", date) == "value"
