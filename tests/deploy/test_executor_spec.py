"""The executor section of a plan: defaults, placeholders, and messages for bad input."""

from __future__ import annotations

import pytest
import yaml

from rolloutd.core.plan import CommandExecutor, NoExecutor, TritonExecutor
from rolloutd.errors import BadInput
from rolloutd.planfile import load_plan, parse_plan
from tests.plans import EXAMPLE_PATH

from .helpers import plan_yaml


def test_the_reference_plan_redeploys_through_triton() -> None:
    """The reference plan's rollback redeploys the pinned set through Triton's model control."""
    executor = load_plan(EXAMPLE_PATH).plan.executor
    assert isinstance(executor, TritonExecutor)
    assert (executor.model, executor.versions) == ("atlas-70b", {"stable": 1, "canary": 3})


def test_a_staging_plan_without_an_executor_section_deploys_nothing() -> None:
    """No executor section (allowed outside production): kind none, no reason given."""
    data = yaml.safe_load(plan_yaml({"kind": "none"}, ["http://h:1"]))
    del data["executor"]
    assert parse_plan(yaml.safe_dump(data)).plan.executor == NoExecutor()


def test_command_and_triton_sections_parse_with_their_defaults() -> None:
    """Durations in the plan's notation; defaults for what is left out."""
    command = parse_plan(
        plan_yaml(
            {"kind": "command", "argv": ["deploy", "{replica}"], "timeout": "5m"}, ["http://h:1"]
        )
    ).plan.executor
    assert isinstance(command, CommandExecutor)
    assert command.timeout.total_seconds() == 300
    assert command.health_deadline.total_seconds() == 300
    triton = parse_plan(plan_yaml({"kind": "triton", "model": "atlas-70b"}, ["http://h:1"])).plan
    assert isinstance(triton.executor, TritonExecutor) and triton.executor.versions == {}


@pytest.mark.parametrize(
    ("executor", "field", "message"),
    [
        ({"kind": "command", "argv": ["x", "{host}"]}, "executor", "argv[1] names ['host']"),
        ({"kind": "command", "argv": []}, "executor.argv", "at least 1 item"),
        (
            {"kind": "command", "argv": ["x"], "env": {"ROLLOUTD_ENGINE": "y"}},
            "executor",
            "env may not set ROLLOUTD_ENGINE",
        ),
        ({"kind": "command", "argv": ["x"], "timeout": 30}, "executor.timeout", "duration"),
        (
            {"kind": "triton", "model": "m", "versions": {"canary": 0}},
            "executor.versions.canary",
            "greater than or equal to 1",
        ),
        ({"kind": "triton", "model": "m", "files_path": "/m/{rack}"}, "executor", "['rack']"),
        ({"kind": "ansible"}, "executor", "kind"),
    ],
)
def test_a_bad_executor_section_names_the_field(
    executor: dict[str, object], field: str, message: str
) -> None:
    """Each mistake is reported with its field path and what was expected."""
    with pytest.raises(BadInput) as caught:
        parse_plan(plan_yaml(executor, ["http://h:1"]), "plan.yaml")
    problem = caught.value.problems[0]
    assert (problem.source, problem.field) == ("plan.yaml", field), problem
    assert message in problem.message
