"""Suite gates on reference answers: a baseline and a canary run of the same cases in, an
Evaluation out.

Each case has a score in [0, 1] on each build (token-F1, exact match, or a judge's
faithfulness), so the comparison is per case, as the tool-argument rules' is: the paired t
test of :mod:`rolloutd.core.stats.paired` on the cases scored on both builds.

* ``at_least_baseline`` and ``no_regression``: fail when the canary's mean score is below
  the baseline's (margin 0). A reference case has one score, not fields, so the two rules
  judge the same thing.
* ``max_drop``: fail (breach, as a trigger) when it is more than ``max_drop_points`` below.

Each judgement spends ``spent_alpha(alpha, run, looks)`` of the gate's alpha, as the
tool-argument rules do, so repeated runs keep the rollout's false-alarm chance at alpha.

Never passed on too little: runs of different suites, more request errors than
``max_request_errors``, more judge errors than the judge's ``max_errors``, or fewer than
:data:`~rolloutd.core.stats.paired.MIN_PAIRS` cases scored on both builds are
*inconclusive*. Pure: runs and ``now`` in.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import SuiteGate
from rolloutd.core.stats.paired import MIN_PAIRS, paired_score_test
from rolloutd.evaluation.references import ReferenceRun
from rolloutd.evaluation.statistics import spending_evidence, spent_alpha
from rolloutd.gates.base import Evaluation, Role


def judge_reference(
    spec: SuiteGate,
    baseline: ReferenceRun,
    canary: ReferenceRun,
    *,
    name: str,
    role: Role,
    now: datetime,
    run: int = 1,
    looks: int = 1,
) -> Evaluation:
    """Judge one pair of scored runs of the same reference suite under the gate's rule."""
    alpha = spent_alpha(spec.alpha, run, looks)
    evidence: dict[str, Any] = {
        "rule": spec.rule,
        "scorer": canary.scorer,
        "suite": canary.suite_path,
        "suite_sha256": canary.suite_sha256,
        "alpha": alpha,
        "alpha_spending": spending_evidence(spec.alpha, run, looks),
        "baseline": baseline.headline(),
        "canary": canary.headline(),
    }
    base = Evaluation(
        name,
        role,
        Verdict.PASS,
        now,
        value=canary.mean_score,
        query=f"suite {canary.suite_path} on {canary.endpoint} vs {baseline.endpoint}",
        evidence=evidence,
    )
    unusable = _unusable(spec, baseline, canary)
    if unusable:
        return replace(base, verdict=Verdict.INCONCLUSIVE, reason=unusable)
    scores = {case.case_id: case.score for case in baseline.cases if case.score is not None}
    pairs = [
        (scores[case.case_id], case.score)
        for case in canary.cases
        if case.score is not None and case.case_id in scores
    ]
    margin = spec.max_drop_points / 100.0 if spec.rule == "max_drop" else 0.0
    test = paired_score_test(
        [b for b, _ in pairs], [c for _, c in pairs], margin=margin, alpha=alpha
    )
    evidence["paired"] = test.as_evidence()
    evidence["worst_cases"] = _worst_cases(baseline, canary)
    worded = "mean score" + (f" drop <= {spec.max_drop_points:g} points" if margin else "")
    base = replace(
        base,
        samples=test.pairs,
        statistic=test.p_value,
        threshold=f"{worded} not below the baseline (paired t, alpha {alpha:.3g})",
    )
    if test.pairs < MIN_PAIRS:
        reason = f"only {test.pairs} cases scored on both builds (at least {MIN_PAIRS} needed)"
        return replace(base, verdict=Verdict.INCONCLUSIVE, reason=reason)
    if not test.fires:
        return base
    low, high = test.interval
    reason = (
        f"{canary.scorer} score {test.canary_mean:.3f} vs baseline {test.baseline_mean:.3f} on "
        f"{test.pairs} paired cases: difference {100 * test.mean_difference:.2f} points "
        f"(interval {100 * low:.2f} to {100 * high:.2f}), p={test.p_value:.2g}"
    )
    verdict = Verdict.BREACH if role == "trigger" and spec.rule == "max_drop" else Verdict.FAIL
    return replace(base, verdict=verdict, reason=reason)


def _worst_cases(baseline: ReferenceRun, canary: ReferenceRun) -> list[dict[str, Any]]:
    # Where the canary lost most, for the operator to read: up to ten cases, largest first.
    scores = {case.case_id: case.score for case in baseline.cases}
    losses = [
        (base - case.score, case.case_id, base, case.score)
        for case in canary.cases
        if case.score is not None and (base := scores.get(case.case_id)) is not None
    ]
    return [
        {"case": case_id, "baseline": round(base, 4), "canary": round(mine, 4)}
        for loss, case_id, base, mine in sorted(losses, key=lambda item: (-item[0], item[1]))[:10]
        if loss > 0
    ]


def _unusable(spec: SuiteGate, baseline: ReferenceRun, canary: ReferenceRun) -> str:
    if baseline.suite_sha256 != canary.suite_sha256:
        return "the baseline and canary runs are of different suites (digests differ)"
    judge_limit = spec.judge.max_errors if spec.judge is not None else 0.0
    for run in (baseline, canary):
        total = len(run.cases)
        if not total:
            return f"the {run.role} run has no cases"
        if run.request_errors / total > spec.max_request_errors:
            return (
                f"{run.request_errors} of {total} cases on the {run.role} were request "
                f"errors (more than {spec.max_request_errors:.0%}): too little measured"
            )
        if run.judge_errors / total > judge_limit:
            return (
                f"{run.judge_errors} of {total} answers on the {run.role} could not be scored "
                f"(judge errors, more than {judge_limit:.0%}): too little measured"
            )
    return ""
