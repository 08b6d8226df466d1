"""Tests of running a due suite gate for a rollout: both pools asked, runs stored, judged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import Plan, SuiteGate
from rolloutd.evaluation import records
from rolloutd.evaluation.gate import suite_due
from rolloutd.evaluation.runner import RunnerOptions
from rolloutd.evaluation.schedule import judge_stored, run_suite_for_gate
from rolloutd.sim.engine import Replica
from tests.evaluation.conftest import first_cases, start
from tests.evaluation.test_gate import NOW
from tests.plans import example_dict, plan_of
from tests.store.seed import seed_rollout

if TYPE_CHECKING:
    from conftest import StoreHandle

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def served_example() -> Iterator[tuple[Plan, Replica, Replica]]:
    """The example plan with one simulated exact replica serving each pool (stopped after)."""
    stable, canary = start("exact", pool="stable"), start("exact", pool="canary")
    try:
        data = example_dict()
        data["pools"]["stable"]["replicas"] = [{"name": "gpu-a", "url": stable.url}]
        data["pools"]["canary"]["replicas"] = [{"name": "gpu-d", "url": canary.url}]
        yield plan_of(data), stable, canary
    finally:
        stable.stop()
        canary.stop()


def test_shadow_then_canary_gates_run_store_and_reuse_the_shadow_baseline(
    store: StoreHandle, tmp_path: Path
) -> None:
    """The shadow gate asks both pools; the canary gate reuses the shadow baseline and asks
    only the canary; a stored pair is re-judged without requests."""
    small = first_cases(tmp_path / "small.jsonl", 40)
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session)
    step_gate = {"role": "step", "rollout_id": rollout_id, "now": NOW, "base_dir": tmp_path}
    with served_example() as (plan, stable, canary):
        canary.set_faults(exactness_drop=0.5)
        run_step_gate = partial(
            run_suite_for_gate,
            store.sessions,
            plan=plan,
            options=RunnerOptions(concurrency=16, send_expected=True),
            **step_gate,
        )
        shadow = plan.gates["tool_args_no_regression"]
        assert isinstance(shadow, SuiteGate)
        # The suite file alone: the example's live traffic is another test's (test_live_suite).
        shadow = shadow.model_copy(update={"suite": "small.jsonl", "sampled": None})
        first = run_step_gate(spec=shadow, name="tool_args_no_regression", step_index=0)
        assert first.verdict is Verdict.FAIL
        asked_stable = stable.ledger.position()
        daily = plan.gates["tool_args_exactness"]
        assert isinstance(daily, SuiteGate)
        daily = daily.model_copy(update={"suite": "small.jsonl", "sampled": None})
        second = run_step_gate(spec=daily, name="tool_args_exactness", step_index=1)
    assert second.verdict is Verdict.FAIL
    assert stable.ledger.position() == asked_stable  # the shadow baseline was reused
    assert second.evidence["baseline"]["run_id"] == first.evidence["baseline"]["run_id"]
    with store.sessions() as session:
        again = judge_stored(session, spec=daily, name="tool_args_exactness", **step_gate)
        stored = records.latest_run(session, rollout_id=rollout_id, role="canary")
    assert again.verdict is Verdict.FAIL and again.value == second.value
    assert stored is not None and stored.suite_path == str(small)
    assert len(stored.cases) == 40 and stored.exactness == second.value


def test_an_unreadable_suite_is_inconclusive_not_an_exception(store: StoreHandle) -> None:
    """A plan naming a missing suite gets an inconclusive verdict naming the file."""
    plan = plan_of(example_dict())
    spec = SuiteGate.model_validate({"kind": "suite", "suite": "nope.jsonl", "rule": "max_drop"})
    evaluation = run_suite_for_gate(
        store.sessions,
        plan=plan,
        spec=spec,
        name="g",
        role="trigger",
        rollout_id=1,
        step_index=0,
        now=NOW,
        base_dir=REPO,
    )
    assert evaluation.verdict is Verdict.INCONCLUSIVE
    assert "nope.jsonl: cannot read the suite" in evaluation.reason


def test_runs_are_stamped_by_the_rollout_clock_so_they_count_in_its_step(
    store: StoreHandle, tmp_path: Path
) -> None:
    """With a rollout clock decades ahead of the wall clock, the stored runs carry its time,
    so the run counts as the current step's and the suite is not due again at once."""
    first_cases(tmp_path / "small.jsonl", 5)
    future = datetime(2099, 6, 1, 12, tzinfo=UTC)
    with store.sessions.begin() as session:
        rollout_id = seed_rollout(session)
    spec = SuiteGate.model_validate(
        {"kind": "suite", "suite": "small.jsonl", "rule": "max_drop", "every": "1d"}
    )
    with served_example() as (plan, _, _):
        run_suite_for_gate(
            store.sessions,
            plan=plan,
            spec=spec,
            name="g",
            role="step",
            rollout_id=rollout_id,
            step_index=0,
            now=future,
            base_dir=tmp_path,
            options=RunnerOptions(concurrency=4, send_expected=True),
            clock=lambda: future,
        )
    with store.sessions() as session:
        ran_at = records.last_run_at(session, rollout_id=rollout_id, gate="g", step_index=0)
        runs = [
            records.latest_run(session, rollout_id=rollout_id, role=role, gate="g")
            for role in ("baseline", "canary")
        ]
    assert ran_at == future
    assert all(run is not None and run.started_at == run.finished_at == future for run in runs)
    entered = future - timedelta(minutes=1)
    assert not suite_due(spec, last_run_at=ran_at, step_entered_at=entered, now=future)
