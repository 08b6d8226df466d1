"""Suite gates: a baseline run and a canary run of the same cases in, an Evaluation out.

Three rules, one per place in a rollout:

* ``no_regression`` (shadow): for every argument (``tool.argument``), the canary is not
  worse than the baseline on the same cases: the exact one-sided McNemar test on the
  discordant cases, Holm-adjusted across arguments, fails the gate at ``alpha``.
* ``at_least_baseline`` (canary steps): the same test on whole calls (schema-aware
  exactness) against the baseline measured in shadow.
* ``max_drop`` (rollback trigger): the canary's exactness is more than
  ``max_drop_points`` below the baseline's, by Tango's score statistic with its exact
  p-value; the evidence carries the rule's false-alarm rate and power on this many cases,
  measured by simulation at the discordance seen in these runs.

A rollout judges a gate's suites many times (at each step's entry, then every ``every``, and
a ``sampled_suite`` beside each run), so each judgement spends only its share of ``alpha``
(:func:`~rolloutd.evaluation.statistics.spent_alpha`: the ``t``-th run gets
``alpha * 6 / (pi^2 t^2)``, split over the run's suites), and the chance of a false alarm over
the whole rollout stays at ``alpha``.

Every verdict keeps the per-field table (both runs' tallies, the paired counts, the p-values
and the interval of the difference) as evidence. Runs of different suites cannot be paired,
and a run with too many request errors measured too little: both are *inconclusive*, never
passed. All of this is pure: runs and ``now`` in, an :class:`Evaluation` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from rolloutd.core.actions import Verdict
from rolloutd.core.plan import SuiteGate
from rolloutd.evaluation.results import FieldTally, RunSummary
from rolloutd.evaluation.statistics import (
    PairedCounts,
    drop_interval,
    holm,
    max_drop_test,
    operating_characteristics,
    pair,
    spending_evidence,
    spent_alpha,
    worse_p_value,
)
from rolloutd.gates.base import Evaluation, Role

WHOLE_CALL = "(whole call)"
"""The row of the per-field table that tests whole calls."""

_SEVERITY = {
    Verdict.PASS: 0,
    Verdict.PENDING: 1,
    Verdict.INCONCLUSIVE: 2,
    Verdict.FAIL: 3,
    Verdict.BREACH: 4,
}


def judge_suite(
    spec: SuiteGate,
    baseline: RunSummary,
    canary: RunSummary,
    *,
    name: str,
    role: Role,
    now: datetime,
    run: int = 1,
    looks: int = 1,
) -> Evaluation:
    """Judge one pair of runs of the same suite under the gate's rule.

    ``run`` is which run of this suite the canary run is in the rollout (1 for the first)
    and ``looks`` how many suites the gate judges at each run: the judgement spends
    ``spent_alpha(spec.alpha, run, looks)`` of the gate's alpha.
    """
    gate_alpha = spec.alpha
    alpha = spent_alpha(gate_alpha, run, looks)
    # Every rule below judges this run at its share of the gate's alpha.
    spec = spec.model_copy(update={"alpha": alpha})
    evidence: dict[str, Any] = {
        "rule": spec.rule,
        "suite": canary.suite_path,
        "suite_sha256": canary.suite_sha256,
        "alpha": alpha,
        "alpha_spending": spending_evidence(gate_alpha, run, looks),
        "baseline": baseline.headline(),
        "canary": canary.headline(),
    }
    base = Evaluation(
        name,
        role,
        Verdict.PASS,
        now,
        value=canary.exactness,
        samples=canary.measured,
        query=f"suite {canary.suite_path} on {canary.endpoint} vs {baseline.endpoint}",
        evidence=evidence,
    )
    if baseline.suite_sha256 != canary.suite_sha256:
        reason = "the baseline and canary runs are of different suites (digests differ)"
        return replace(base, verdict=Verdict.INCONCLUSIVE, reason=reason)
    for summary in (baseline, canary):
        share = summary.request_errors / len(summary.cases) if summary.cases else 1.0
        if share > spec.max_request_errors:
            reason = (
                f"{summary.request_errors} of {len(summary.cases)} cases on the "
                f"{summary.role} were request errors (more than "
                f"{spec.max_request_errors:.0%}): too little measured"
            )
            return replace(base, verdict=Verdict.INCONCLUSIVE, reason=reason)
    table = field_table(baseline, canary, spec.alpha)
    cases = pair(_exact_flags(baseline), _exact_flags(canary))
    evidence["fields"] = table
    evidence["calls"] = {
        **cases.as_evidence(),
        "p_value_worse": worse_p_value(cases),
        "difference_interval_points": _difference_interval(cases),
    }
    base = replace(base, samples=cases.pairs)
    if spec.rule == "no_regression":
        return _no_regression(spec, base, table)
    if spec.rule == "at_least_baseline":
        return _at_least_baseline(spec, base, cases)
    return _max_drop(spec, base, cases)


def combine(evaluations: Sequence[Evaluation], labels: Sequence[str]) -> Evaluation:
    """One verdict for a gate that judged several suites: the worst, with each one's evidence."""
    worst = max(evaluations, key=lambda e: _SEVERITY[e.verdict])
    if len(evaluations) == 1:
        return worst
    reasons = [f"{label}: {e.reason}" for label, e in zip(labels, evaluations, strict=True)]
    return replace(
        worst,
        reason="; ".join(reason for reason in reasons if not reason.endswith(": ")),
        evidence={label: e.evidence for label, e in zip(labels, evaluations, strict=True)},
    )


def suite_due(
    spec: SuiteGate,
    *,
    last_run_at: datetime | None,
    step_entered_at: datetime | None,
    now: datetime,
) -> bool:
    """Whether the gate's suite should run now.

    It runs once at the step's entry (unless ``at_entry`` is off, in which case the first
    run waits ``every``), then every ``every``; without ``every`` it runs once per step.
    """
    if last_run_at is None or (step_entered_at is not None and last_run_at < step_entered_at):
        if spec.at_entry or spec.every is None:
            return True
        return step_entered_at is None or now - step_entered_at >= spec.every
    return spec.every is not None and now - last_run_at >= spec.every


def field_table(baseline: RunSummary, canary: RunSummary, alpha: float) -> list[dict[str, Any]]:
    """The per-field evidence: both runs' tallies and the paired test of each argument.

    The first row, :data:`WHOLE_CALL`, tests whole calls (schema-aware exactness) in the
    same Holm family: a build that loses a little on every field can be invisible field by
    field (75 cases each) and plain on the 300 calls.
    """
    base_flags, canary_flags = _field_flags(baseline), _field_flags(canary)
    measured = {c.case_id for c in baseline.cases if c.measured} & {
        c.case_id for c in canary.cases if c.measured
    }
    counts: dict[str, PairedCounts] = {
        WHOLE_CALL: pair(_exact_flags(baseline), _exact_flags(canary))
    }
    for key in sorted(set(base_flags) | set(canary_flags)):
        seen = (set(base_flags.get(key, {})) | set(canary_flags.get(key, {}))) & measured
        # A field a run did not send in a case (an extra the other run added) was not wrong.
        counts[key] = pair(
            {case: base_flags.get(key, {}).get(case, True) for case in seen},
            {case: canary_flags.get(key, {}).get(case, True) for case in seen},
        )
    p_values = {key: worse_p_value(paired) for key, paired in counts.items()}
    adjusted = holm(p_values)
    rows = []
    for key, paired in counts.items():
        base_tally, canary_tally = baseline.fields.get(key), canary.fields.get(key)
        if key == WHOLE_CALL:
            base_tally, canary_tally = _call_tally(baseline), _call_tally(canary)
        rows.append(
            {
                "field": key,
                "baseline": base_tally.as_json() if base_tally else None,
                "canary": canary_tally.as_json() if canary_tally else None,
                **paired.as_evidence(),
                "p_value_worse": p_values[key],
                "p_value_holm": adjusted[key],
                "difference_interval_points": _difference_interval(paired),
                "regressed": adjusted[key] < alpha,
            }
        )
    return rows


def _no_regression(spec: SuiteGate, base: Evaluation, table: list[dict[str, Any]]) -> Evaluation:
    threshold = (
        f"no field worse than the baseline (Holm-adjusted exact McNemar, alpha {spec.alpha:g})"
    )
    smallest = min((row["p_value_holm"] for row in table), default=1.0)
    evaluation = replace(base, threshold=threshold, statistic=smallest)
    regressed = [row for row in table if row["regressed"]]
    if not regressed:
        return evaluation
    worst = ", ".join(
        f"{row['field']} (worse in {row['canary_worse']}, better in {row['canary_better']} "
        f"cases, p={row['p_value_holm']:.2g})"
        for row in regressed[:5]
    )
    reason = f"regressed: {worst}"
    if all(row["field"] == WHOLE_CALL for row in regressed):
        # No single field is significant on its own: name where the lost calls went wrong.
        fields = sorted(
            (row for row in table if row["field"] != WHOLE_CALL and row["canary_worse"]),
            key=lambda row: (-(row["canary_worse"] - row["canary_better"]), row["field"]),
        )
        reason += "; most worse cases in " + ", ".join(
            f"{row['field']} ({row['canary_worse']} vs {row['canary_better']})"
            for row in fields[:5]
        )
    return replace(evaluation, verdict=Verdict.FAIL, reason=reason)


def _at_least_baseline(spec: SuiteGate, base: Evaluation, cases: PairedCounts) -> Evaluation:
    p_value = worse_p_value(cases)
    evaluation = replace(
        base,
        threshold=f"exactness not below the baseline (exact McNemar, alpha {spec.alpha:g})",
        statistic=p_value,
    )
    if p_value >= spec.alpha:
        return evaluation
    reason = (
        f"exactness {_pct(evaluation.evidence['canary']['exactness'])} vs baseline "
        f"{_pct(evaluation.evidence['baseline']['exactness'])}: the canary is wrong where the "
        f"baseline is right in {cases.canary_worse} cases and the reverse in "
        f"{cases.canary_better} (p={p_value:.2g})"
    )
    return replace(evaluation, verdict=Verdict.FAIL, reason=reason)


def _max_drop(spec: SuiteGate, base: Evaluation, cases: PairedCounts) -> Evaluation:
    margin = spec.max_drop_points / 100.0
    test = max_drop_test(cases, margin, spec.alpha)
    churn = _churn(cases)
    characteristics = operating_characteristics(cases.pairs, margin, spec.alpha, churn)
    evidence = {
        **base.evidence,
        "max_drop": test.as_evidence(),
        "operating_characteristics": {
            "cases": cases.pairs,
            "churn": churn,
            "by_true_drop": list(characteristics),
            "note": "share of simulated pairs of runs on which the rule fires ('rule') and on "
            "which 'observed drop > margin' would ('naive'); churn = discordant share "
            "seen here",
        },
    }
    evaluation = replace(
        base,
        threshold=f"drop <= {spec.max_drop_points:g} points (score test, alpha {spec.alpha:g})",
        statistic=test.statistic,
        evidence=evidence,
    )
    if not test.fires:
        return evaluation
    low, high = test.interval
    reason = (
        f"exactness dropped {100 * cases.drop:.2f} points (interval {100 * low:.2f} to "
        f"{100 * high:.2f}), more than {spec.max_drop_points:g} (p={test.p_value:.2g})"
    )
    verdict = Verdict.BREACH if base.role == "trigger" else Verdict.FAIL
    return replace(evaluation, verdict=verdict, reason=reason)


def _churn(cases: PairedCounts) -> float:
    # The discordant share rounded up to a whole point (at least 2): a cache key for the
    # simulation, and on the cautious side (more churn, more false alarms to report).
    if not cases.pairs:
        return 0.02
    points = math.ceil(round(100 * cases.discordant / cases.pairs, 6))
    return max(0.02, min(0.5, points / 100))


def _difference_interval(counts: PairedCounts) -> list[float]:
    # Canary minus baseline, in points: the drop interval turned around.
    low, high = drop_interval(counts, 0.95)
    return [round(-100 * high, 3), round(-100 * low, 3)]


def _call_tally(run: RunSummary) -> FieldTally:
    counts = {
        "correct": run.outcomes["correct"],
        "format": run.exact - run.outcomes["correct"],
        "wrong_value": run.measured - run.exact,
    }
    return FieldTally(WHOLE_CALL, counts, run.schema_violations, run.strict_exact)


def _exact_flags(run: RunSummary) -> dict[str, bool]:
    return {case.case_id: bool(case.exact) for case in run.cases if case.measured}


def _field_flags(run: RunSummary) -> Mapping[str, dict[str, bool]]:
    flags: dict[str, dict[str, bool]] = {}
    for case in run.cases:
        if not case.measured:
            continue
        for result in case.fields:
            flags.setdefault(case.field_key(result), {})[case.case_id] = result.good
    return flags


def _pct(value: object) -> str:
    return f"{value:.2%}" if isinstance(value, float) else "n/a"
