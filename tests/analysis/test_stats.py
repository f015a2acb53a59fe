"""Statistics: exact sign-flip, wild-cluster bootstrap-t, Holm, CIs, McNemar, Wilcoxon."""

from __future__ import annotations

import numpy as np
import pytest

from ncclbot_sweep.analysis.stats import (
    bootstrap_ci,
    clopper_pearson,
    holm,
    mcnemar_exact,
    sign_flip_test,
    wilcoxon_signed_rank,
    wild_cluster_bootstrap_t,
)


def test_sign_flip_exact_minimum_p_and_symmetry():
    # nine scenarios all favouring one side: only the two all-same patterns reach the statistic
    assert sign_flip_test(np.arange(1, 10)).p_value == pytest.approx(2 / 512)
    assert sign_flip_test(-np.arange(1, 10)).p_value == pytest.approx(2 / 512)
    # a balanced vector is not significant
    assert sign_flip_test([1.0, -1.0, 1.0, -1.0]).p_value == 1.0


def test_sign_flip_hand_count():
    # d = (3, 1): patterns give |mean| 2, 1, 1, 2 -> p = 2/4
    assert sign_flip_test([3.0, 1.0]).p_value == 0.5


def test_sign_flip_random_patterns_above_exact_max():
    p = sign_flip_test(np.ones(25), exact_max=20, n_random=2000, seed=1).p_value
    assert 0 < p < 0.01


def test_holm():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])
    np.testing.assert_allclose(holm([0.2, 0.3]), [0.4, 0.4])


def test_wild_cluster_bootstrap_rejects_a_shift_and_not_noise():
    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(9), 10)
    shifted = 1.0 + rng.standard_normal(90) * 0.3
    assert wild_cluster_bootstrap_t(shifted, clusters, n_boot=999, seed=1).p_value < 0.01
    noise = rng.standard_normal(90)
    assert wild_cluster_bootstrap_t(noise, clusters, n_boot=999, seed=1).p_value > 0.05


def test_bootstrap_ci_contexts_and_clusters():
    v = np.r_[np.zeros(50), np.ones(50)]
    lo, hi = bootstrap_ci(v, n_boot=500, seed=0)
    assert lo < 0.5 < hi and hi - lo < 0.3
    lo_c, hi_c = bootstrap_ci(v, clusters=np.repeat([0, 1], 50), n_boot=500, seed=0)
    assert lo_c <= 0.0 + 1e-12 and hi_c >= 1.0 - 1e-12  # two clusters: all-0 and all-1 resamples happen


def test_clopper_pearson_known_values():
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.3085, abs=1e-4)
    lo, hi = clopper_pearson(5, 10)
    assert lo == pytest.approx(0.1871, abs=1e-4) and hi == pytest.approx(0.8129, abs=1e-4)


def test_mcnemar_and_wilcoxon():
    assert mcnemar_exact(15, 0).p_value == pytest.approx(2 * 0.5**15)
    assert mcnemar_exact(0, 0).p_value == 1.0
    a = np.arange(1.0, 21.0)
    assert wilcoxon_signed_rank(a + 1.0, a).p_value < 0.001
    assert wilcoxon_signed_rank(a, a).p_value == 1.0
