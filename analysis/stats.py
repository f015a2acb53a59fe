"""Statistics for policy comparisons (paper sections 5-6.1, appendix I).

Contexts within a (collective, nodes) scenario are not independent, so the primary test is
the exact sign-flip test over scenarios; context-level tests (Wilcoxon, McNemar) are
descriptive. Every resampling function takes a ``seed`` or a ``numpy.random.Generator``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

__all__ = [
    "sign_flip_test",
    "wild_cluster_bootstrap_t",
    "holm",
    "bootstrap_ci",
    "clopper_pearson",
    "mcnemar_exact",
    "wilcoxon_signed_rank",
    "TestResult",
]


@dataclasses.dataclass(frozen=True)
class TestResult:
    """A statistic and its two-sided p-value."""

    statistic: float
    p_value: float


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def sign_flip_test(diffs, *, exact_max: int = 20, n_random: int = 100_000, seed=0) -> TestResult:
    """Two-sided sign-flip test of mean zero over cluster-level differences.

    The statistic is ``|mean(d)|``; the p-value is the share of sign patterns whose
    statistic is at least the observed one (all ``2**n`` patterns when ``n <= exact_max``,
    else ``n_random`` random patterns plus the observed one). With 9 scenarios the smallest
    possible p is ``2/512 = 0.0039``.
    """
    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    n = d.size
    if n == 0:
        return TestResult(float("nan"), float("nan"))
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, observed)
    if n <= exact_max:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        stats = np.abs(signs @ d) / n
        return TestResult(float(observed), float(np.mean(stats >= observed - tol)))
    signs = _rng(seed).choice((1.0, -1.0), size=(n_random, n))
    stats = np.abs(signs @ d) / n
    return TestResult(float(observed), float((1 + np.sum(stats >= observed - tol)) / (n_random + 1)))


def _cluster_t(d: np.ndarray, cluster_idx: np.ndarray, n_clusters: int) -> float:
    mean = d.mean()
    sums = np.bincount(cluster_idx, weights=d - mean, minlength=n_clusters)
    se = math.sqrt(n_clusters / max(n_clusters - 1, 1) * float(np.sum(sums**2))) / d.size
    return float(mean / se) if se > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))


def wild_cluster_bootstrap_t(values, clusters, *, n_boot: int = 9999, seed=0) -> TestResult:
    """Wild-cluster bootstrap-t (Rademacher weights, null imposed) for a pooled mean of zero.

    ``values`` are context-level paired differences and ``clusters`` their scenario labels;
    the t statistic uses the cluster-robust standard error with the ``G/(G-1)`` factor.
    """
    d = np.asarray(values, dtype=float)
    _, cluster_idx = np.unique(np.asarray(clusters), return_inverse=True)
    n_clusters = int(cluster_idx.max()) + 1
    t_obs = _cluster_t(d, cluster_idx, n_clusters)
    weights = _rng(seed).choice((1.0, -1.0), size=(n_boot, n_clusters))
    count = 0
    for w in weights:
        t_star = _cluster_t(d * w[cluster_idx], cluster_idx, n_clusters)
        count += abs(t_star) >= abs(t_obs) - 1e-12
    return TestResult(t_obs, float((1 + count) / (n_boot + 1)))


def holm(p_values) -> np.ndarray:
    """Holm step-down adjusted p-values (same order as given)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def bootstrap_ci(values, *, statistic=np.mean, clusters=None, n_boot: int = 2000, level: float = 0.95,
                 seed=0) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` resampling contexts, or whole clusters if given."""
    v = np.asarray(values, dtype=float)
    rng = _rng(seed)
    if clusters is None:
        idx = rng.integers(0, v.size, size=(n_boot, v.size))
        stats = np.array([statistic(v[i]) for i in idx])
    else:
        labels, inverse = np.unique(np.asarray(clusters), return_inverse=True)
        members = [np.flatnonzero(inverse == g) for g in range(labels.size)]
        picks = rng.integers(0, labels.size, size=(n_boot, labels.size))
        stats = np.array([statistic(v[np.concatenate([members[g] for g in row])]) for row in picks])
    alpha = (1.0 - level) / 2.0
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1.0 - alpha))


def clopper_pearson(k: int, n: int, *, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for ``k`` successes in ``n`` trials."""
    from scipy.stats import beta

    if n == 0:
        return (0.0, 1.0)
    alpha = 1.0 - level
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def mcnemar_exact(b: int, c: int) -> TestResult:
    """Exact McNemar test on the discordant counts ``b`` (only a) and ``c`` (only b)."""
    from scipy.stats import binomtest

    n = b + c
    if n == 0:
        return TestResult(0.0, 1.0)
    return TestResult(float(b - c), float(binomtest(min(b, c), n, 0.5).pvalue))


def wilcoxon_signed_rank(a, b) -> TestResult:
    """Wilcoxon signed-rank test of paired samples (scipy; zero differences dropped)."""
    from scipy.stats import wilcoxon

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not np.any(d != 0):
        return TestResult(0.0, 1.0)
    res = wilcoxon(d, zero_method="wilcox")
    return TestResult(float(res.statistic), float(res.pvalue))
