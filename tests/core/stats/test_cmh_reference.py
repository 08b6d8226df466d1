"""The compare gate's final look, with its dispersion known, is the one-sided
Cochran-Mantel-Haenszel test: held against statsmodels' independent implementation."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import StratifiedTable

from rolloutd.core.stats.stratified import Dispersion, Tally, stratified_test


def test_the_final_look_is_cmh_on_random_stratified_tables() -> None:
    """On 500 seeded sets of 2-8 strata (canary and stable exposure, events at rates that
    differ or not), z squared is statsmodels' uncorrected MH statistic and the one-sided
    decision at alpha = 0.04 is the one its p-value gives."""
    rng = np.random.default_rng(28)
    disagreements = 0
    for _ in range(500):
        strata = int(rng.integers(2, 9))
        tallies, tables = [], []
        for _ in range(strata):
            canary = int(rng.integers(20, 3000))
            stable = int(rng.integers(400, 30000))
            base = float(rng.uniform(0.002, 0.08))
            ratio = float(rng.choice([1.0, 1.0, 1.3, 2.0, 0.7]))
            k_c = int(rng.binomial(canary, min(1.0, base * ratio)))
            k_s = int(rng.binomial(stable, base))
            tallies.append(Tally(k_c, canary, k_s, stable))
            tables.append([[k_c, canary - k_c], [k_s, stable - k_s]])
        look = stratified_test([tallies], alpha=0.04, dispersion=Dispersion(0, 0, strata, 1.0))
        reference = StratifiedTable(np.array(tables).transpose(1, 2, 0)).test_null_odds(
            correction=False
        )
        assert look.statistic**2 == pytest.approx(float(reference.statistic), rel=1e-9, abs=1e-12)
        one_sided = reference.pvalue / 2 if look.statistic > 0 else 1 - reference.pvalue / 2
        disagreements += look.reject != (one_sided < 0.04)
    assert disagreements == 0
