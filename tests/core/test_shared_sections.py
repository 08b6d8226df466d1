"""Plans that differ only in name and paths share one instance of each equal section."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from rolloutd.core.plan import Plan
from rolloutd.core.plan.base import Sections, share_sections
from rolloutd.planfile import parse_plan
from tests.plans import REPO, file_plan, to_yaml


def _parsed(text: str) -> Plan:
    return parse_plan(text, "plan.yaml", beside=False).plan


def test_copies_of_a_plan_share_their_gates_steps_and_pools(tmp_path: Path) -> None:
    kept: Sections = weakref.WeakValueDictionary()
    texts = [
        to_yaml(file_plan(f"svc-{i}", tmp_path / f"w{i}.json", tmp_path / "metrics.json"))
        for i in range(3)
    ]
    plans = [share_sections(_parsed(t), kept) for t in texts]
    first, *others = plans
    for plan in others:
        assert plan.name != first.name and plan.router != first.router  # each its own
        assert plan.metrics is first.metrics  # the same file: one section
        assert plan.pools is first.pools and plan.limits is first.limits
        assert all(plan.gates[g] is first.gates[g] for g in first.gates)
        assert all(s is f for s, f in zip(plan.steps, first.steps, strict=True))
    # Nothing changed: each equals its own parse, unshared.
    assert plans == [_parsed(t) for t in texts]


@pytest.mark.parametrize("path", sorted((REPO / "config" / "plans").glob("*.yaml")), ids=str)
def test_sharing_changes_no_plan(path: Path) -> None:
    kept: Sections = weakref.WeakValueDictionary()
    text = path.read_text()
    once = share_sections(_parsed(text), kept)
    again = share_sections(_parsed(text), kept)
    assert again is once  # an equal plan is the kept one itself
    assert once == _parsed(text)
    assert once.model_dump() == _parsed(text).model_dump()


def test_a_section_no_plan_uses_any_more_is_let_go(tmp_path: Path) -> None:
    kept: Sections = weakref.WeakValueDictionary()
    plan = share_sections(_parsed(to_yaml(file_plan("svc", tmp_path / "w", tmp_path / "m"))), kept)
    assert len(kept) > 0
    del plan
    gc.collect()
    # What stays is what the model's own field defaults hold (Limits(), Rollback() ...).
    defaults = [f.default for f in Plan.model_fields.values()]
    assert [s for s in kept.values() if not any(s is d for d in defaults)] == []
