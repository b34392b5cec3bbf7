"""The Schaake shuffle and the Gaussian copula, against hand-worked cases and closed forms.

Sampling tolerances: with T (or n) = 20,000 independent cases the standard error of a sample
correlation is (1 − ρ²)/√T ≤ 0.0071 and that of a Spearman correlation about the same, so
0.03 is over 4 standard errors; the generators are seeded, so the tests are deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtri

from ensml.errors import EnsmlError
from ensml.postprocess.copulas import (
    MAX_COPULA_COMPONENTS,
    GaussianCopula,
    fit_gaussian_copula,
    gaussian_copula_members,
    pit_normal_scores,
    schaake_shuffle,
)

# A 5×5 correlation matrix with positive, negative and zero entries (positive definite).
R5 = np.array(
    [
        [1.0, 0.6, 0.3, -0.2, 0.0],
        [0.6, 1.0, 0.5, 0.0, 0.1],
        [0.3, 0.5, 1.0, 0.2, -0.3],
        [-0.2, 0.0, 0.2, 1.0, 0.4],
        [0.0, 0.1, -0.3, 0.4, 1.0],
    ]
)
SAMPLING_TOL = 0.03  # > 4 standard errors of a correlation from 20,000 cases (module note)


def _draws(r: np.ndarray, t: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).multivariate_normal(np.zeros(len(r)), r, size=t)


def _ranks(x: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.argsort(np.argsort(x, axis=axis), axis=axis)


# --- Schaake shuffle ---------------------------------------------------------------------


def test_schaake_hand_worked_case() -> None:
    # template (N=4 dates, D=2):  ranks per column (0 = smallest):
    #   [[10, 3],                 [[0, 2],
    #    [30, 1],                  [2, 0],
    #    [20, 4],                  [1, 3],
    #    [40, 2]]                  [3, 1]]
    # samples sorted per column: [0.1, 0.2, 0.3, 0.4] and [5, 6, 7, 8]; member j takes the
    # sorted sample of template j's rank: column 0 -> [0.1, 0.3, 0.2, 0.4], column 1 -> [7, 5, 8, 6].
    # Spearman of the template's columns: d = [-2, 2, -2, 2], 1 - 6·16/(4·15) = -0.6.
    template = np.array([[10.0, 3.0], [30.0, 1.0], [20.0, 4.0], [40.0, 2.0]])
    samples = np.array([[0.4, 7.0], [0.1, 5.0], [0.3, 8.0], [0.2, 6.0]])
    out = schaake_shuffle(samples, template)
    np.testing.assert_array_equal(out, [[0.1, 7.0], [0.3, 5.0], [0.2, 8.0], [0.4, 6.0]])
    assert stats.spearmanr(out[:, 0], out[:, 1]).statistic == pytest.approx(-0.6)
    assert stats.spearmanr(template[:, 0], template[:, 1]).statistic == pytest.approx(-0.6)


def test_schaake_keeps_margins_and_takes_the_template_ranks() -> None:
    rng = np.random.default_rng(0)
    n, d = 20, 6
    template = _draws(np.eye(d) * 0.5 + 0.5, n, seed=1)  # correlated past observations
    samples = rng.gamma(2.0, 3.0, (3, n, d)).astype(np.float32)  # 3 cases, (N, D) each
    out = schaake_shuffle(samples, template)
    assert out.shape == samples.shape and out.dtype == np.float32
    # margins exactly preserved: each component's multiset of values is unchanged
    np.testing.assert_array_equal(np.sort(out, axis=-2), np.sort(samples, axis=-2))
    for case in out:
        np.testing.assert_array_equal(_ranks(case), _ranks(template))
        np.testing.assert_allclose(
            stats.spearmanr(case).statistic, stats.spearmanr(template).statistic, rtol=1e-12
        )


def test_schaake_member_axis_and_per_case_templates() -> None:
    rng = np.random.default_rng(3)
    samples = rng.normal(size=(7, 3, 4))  # members first, then (3, 4) components
    template = rng.normal(size=(7, 3, 4))
    out = schaake_shuffle(samples, template, axis=0)
    np.testing.assert_array_equal(np.sort(out, axis=0), np.sort(samples, axis=0))
    np.testing.assert_array_equal(_ranks(out), _ranks(template))
    # one template per case along a leading axis
    samples, template = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 3))
    out = schaake_shuffle(samples, template, axis=1)
    np.testing.assert_array_equal(_ranks(out, axis=1), _ranks(template, axis=1))


def test_schaake_ties_broken_at_random_reproducibly() -> None:
    # Precipitation-like template: dates 0, 1, 2 dry (tied) at both points.
    template = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.5, 0.2], [0.7, 3.0]])
    samples = np.arange(10.0).reshape(2, 5).T  # column 0: 0..4, column 1: 5..9
    by_order = schaake_shuffle(samples, template)
    np.testing.assert_array_equal(by_order, [[0, 5], [1, 6], [2, 7], [4, 8], [3, 9]])
    first = schaake_shuffle(samples, template, rng=np.random.default_rng(7))
    again = schaake_shuffle(samples, template, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(first, again)
    outcomes = {
        schaake_shuffle(samples, template, rng=np.random.default_rng(seed))[:3].tobytes()
        for seed in range(20)
    }
    assert len(outcomes) > 1  # the dry dates do not always take the same sorted values
    for seed in range(5):
        out = schaake_shuffle(samples, template, rng=np.random.default_rng(seed))
        np.testing.assert_array_equal(out[3:], by_order[3:])  # untied dates keep their ranks
        np.testing.assert_array_equal(np.sort(out[:3], axis=0), by_order[:3])


@pytest.mark.parametrize(
    ("samples", "template", "match"),
    [
        (np.zeros((5, 3)), np.zeros((4, 3)), "do not give 5 members"),
        (np.zeros((5, 3)), np.zeros((5, 2)), "do not broadcast"),
        (np.zeros((5, 3)), np.zeros(5), "do not give 5 members"),
        (np.array([[0.0, 1.0], [np.nan, 2.0]]), np.zeros((2, 2)), "samples have 1 NaN"),
        (np.zeros((2, 2)), np.array([[0.0, 1.0], [np.nan, 2.0]]), "templates have 1 NaN"),
    ],
)
def test_schaake_bad_inputs(samples: np.ndarray, template: np.ndarray, match: str) -> None:
    with pytest.raises(EnsmlError, match=match) as err:
        schaake_shuffle(samples, template)
    assert "\n" not in str(err.value)


def test_schaake_bad_axis() -> None:
    with pytest.raises(EnsmlError, match="member axis 3"):
        schaake_shuffle(np.zeros((4, 2)), np.zeros((4, 2)), axis=3)
    with pytest.raises(EnsmlError, match=r"member axis -2 is outside samples of shape \(5,\)"):
        schaake_shuffle(np.zeros(5), np.zeros(5))


# --- Gaussian copula: fitting ------------------------------------------------------------


def test_fit_recovers_a_known_correlation() -> None:
    assert np.linalg.eigvalsh(R5).min() > 0.1
    x = _draws(R5, 20_000, seed=11)
    for shrinkage in (0.0, None):
        copula = fit_gaussian_copula(x, shrinkage=shrinkage)
        assert copula.dim == 5 and copula.n_cases == 20_000
        np.testing.assert_allclose(copula.correlation, R5, atol=SAMPLING_TOL)
    assert copula.shrinkage < 0.01  # the optimal weight is small when T ≫ D


def test_shrinkage_extremes_and_fixed_weight() -> None:
    x = _draws(R5, 50, seed=12) * 3.0 + 1.0  # scale and shift do not change a correlation
    sample = np.corrcoef(x, rowvar=False)
    np.testing.assert_allclose(fit_gaussian_copula(x, shrinkage=0.0).correlation, sample, atol=1e-12)
    np.testing.assert_allclose(fit_gaussian_copula(x, shrinkage=1.0).correlation, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(
        fit_gaussian_copula(x, shrinkage=0.3).correlation, 0.7 * sample + 0.3 * np.eye(5), atol=1e-12
    )
    copula = fit_gaussian_copula(x, shrinkage=0.3)
    assert copula.shrinkage == 0.3 and not copula.cholesky.flags.writeable


def _schafer_strimmer(x: np.ndarray) -> float:
    """λ* of Schäfer and Strimmer (2005), target D, written out element by element."""
    t, d = x.shape
    xs = (x - x.mean(axis=0)) / x.std(axis=0, ddof=1)
    num = den = 0.0
    for i in range(d):
        for j in range(d):
            if i != j:
                w = xs[:, i] * xs[:, j]
                num += t / (t - 1) ** 3 * ((w - w.mean()) ** 2).sum()
                den += (w.sum() / (t - 1)) ** 2
    return min(max(num / den, 0.0), 1.0)


def test_optimal_shrinkage_matches_the_closed_form() -> None:
    x = _draws(R5, 30, seed=13)
    copula = fit_gaussian_copula(x)
    assert copula.shrinkage == pytest.approx(_schafer_strimmer(x), rel=1e-10)
    assert 0.0 < copula.shrinkage < 1.0
    lam = copula.shrinkage
    sample = np.corrcoef(x, rowvar=False)
    np.testing.assert_allclose(copula.correlation, (1 - lam) * sample + lam * np.eye(5), atol=1e-12)


def test_fewer_cases_than_components_need_shrinkage() -> None:
    x = _draws(np.eye(10) * 0.5 + 0.5, 4, seed=14)  # T = 4 ≤ D = 10: C is singular
    copula = fit_gaussian_copula(x)
    assert copula.shrinkage > 0.0
    assert np.linalg.eigvalsh(copula.correlation).min() >= copula.shrinkage - 1e-12
    with pytest.raises(EnsmlError, match="not positive definite with shrinkage 0; use a larger"):
        fit_gaussian_copula(x, shrinkage=0.0)


def test_rows_with_nan_are_dropped() -> None:
    x = _draws(R5, 40, seed=15)
    holes = x.copy()
    holes[[3, 17], [1, 4]] = np.nan
    got = fit_gaussian_copula(holes, shrinkage=0.1)
    want = fit_gaussian_copula(np.delete(x, [3, 17], axis=0), shrinkage=0.1)
    assert got.n_cases == 38
    np.testing.assert_allclose(got.cholesky, want.cholesky, atol=1e-14)


def test_pit_normal_scores_are_finite() -> None:
    z = pit_normal_scores(np.array([0.0, 0.5, 1.0, np.nan]))
    assert z[1] == 0.0 and np.isfinite(z[:3]).all() and np.isnan(z[3])
    assert z[0] == pytest.approx(ndtri(1e-6)) and z[2] == pytest.approx(-z[0])


def test_a_constant_component_is_independent_of_the_others() -> None:
    scores = np.array([[0.0, 1.0, 0.5], [1.0, 1.0, 1.4], [2.0, 1.0, 2.6]])
    corr = fit_gaussian_copula(scores, shrinkage=0.0).correlation
    np.testing.assert_allclose(corr[1], [0.0, 1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(corr[0, 2], np.corrcoef(scores[:, 0], scores[:, 2])[0, 1])


@pytest.mark.parametrize(
    ("scores", "kwargs", "match"),
    [
        (np.zeros(5), {}, r"shape \(cases, components\), got \(5,\)"),
        (np.array([[0.0, 1.0], [np.nan, 2.0], [1.0, np.nan]]), {}, "1 training case.*at least 2.*of 3 given"),
        (np.zeros((3, MAX_COPULA_COMPONENTS + 1)), {}, "8193 components exceed the cap of 8192.*regions"),
        (np.zeros((3, 0)), {}, "at least 1 component"),
        (np.array([[0.0, 1.0], [np.inf, 2.0], [1.0, 0.5]]), {}, "infinite normal scores"),
        (np.zeros((3, 2)) + np.arange(3)[:, None], {"shrinkage": 1.5}, r"shrinkage must be in \[0, 1\]"),
    ],
)
def test_fit_bad_inputs(scores: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(EnsmlError, match=match) as err:
        fit_gaussian_copula(scores, **kwargs)
    assert "\n" not in str(err.value)


# --- Gaussian copula: members ------------------------------------------------------------

COPULA = fit_gaussian_copula(_draws(R5, 20_000, seed=21), shrinkage=0.0)


def test_normal_margins_have_mean_std_and_the_copulas_correlation() -> None:
    mu = np.array([280.0, 5.5e4, 0.0, -3.0, 10.0])
    sigma = np.array([2.0, 80.0, 1.0, 0.5, 4.0])
    n = 20_000
    members = gaussian_copula_members(lambda u: mu + sigma * ndtri(u), COPULA, n, np.random.default_rng(1))
    assert members.shape == (n, 5)
    # standard errors: σ/√n for the mean, about σ/√(2n) for the std; 5 of them
    np.testing.assert_array_less(np.abs(members.mean(axis=0) - mu), 5 * sigma / np.sqrt(n))
    np.testing.assert_array_less(np.abs(members.std(axis=0) / sigma - 1), 5 / np.sqrt(2 * n))
    np.testing.assert_allclose(np.corrcoef(members, rowvar=False), COPULA.correlation, atol=SAMPLING_TOL)


def test_gamma_margins_and_spearman_of_the_gaussian_copula() -> None:
    shape = np.array([0.5, 1.0, 2.0, 5.0, 1.0])  # 1.0: exponential margins
    scale = np.array([1.0, 3.0, 0.5, 2.0, 10.0])
    members = gaussian_copula_members(
        lambda u: stats.gamma.ppf(u, shape, scale=scale), COPULA, 20_000, np.random.default_rng(2)
    )
    for k in range(5):
        assert stats.kstest(members[:, k], "gamma", args=(shape[k], 0.0, scale[k])).pvalue > 0.001
    want = 6 / np.pi * np.arcsin(COPULA.correlation / 2)
    np.testing.assert_allclose(stats.spearmanr(members).statistic, want, atol=SAMPLING_TOL)


def test_members_per_case_and_reproducible() -> None:
    mu = np.arange(3.0 * 5).reshape(3, 1, 5)  # one mean per case and component

    def quantile(u: np.ndarray) -> np.ndarray:
        return mu + ndtri(u)

    a = gaussian_copula_members(quantile, COPULA, 8, np.random.default_rng(5), batch_shape=(3,))
    b = gaussian_copula_members(quantile, COPULA, 8, np.random.default_rng(5), batch_shape=(3,))
    c = gaussian_copula_members(quantile, COPULA, 8, np.random.default_rng(6), batch_shape=(3,))
    assert a.shape == (3, 8, 5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_members_stay_finite_for_unbounded_margins() -> None:
    copula = fit_gaussian_copula(np.array([[0.0], [1.0], [2.0]]))
    assert copula.dim == 1 and copula.shrinkage == 0.0

    class HugeDraws:  # a generator whose normal draws are far in the tails
        def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
            return np.full(shape, 40.0) * np.array([1.0, -1.0])[:, None]

    members = gaussian_copula_members(ndtri, copula, 2, HugeDraws())  # type: ignore[arg-type]
    assert np.isfinite(members).all() and members[0, 0] > 8 and members[1, 0] < -8


def test_members_bad_inputs() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(EnsmlError, match=r"quantile function gave shape \(10,\) for probabilities of shape"):
        gaussian_copula_members(lambda u: u[:, 0], COPULA, 10, rng)
    with pytest.raises(EnsmlError, match="quantile function's values have 50 NaN"):
        gaussian_copula_members(lambda u: u * np.nan, COPULA, 10, rng)
    with pytest.raises(EnsmlError, match="at least 1, got 0"):
        gaussian_copula_members(ndtri, COPULA, 0, rng)
    with pytest.raises(EnsmlError, match="expected a GaussianCopula, got ndarray"):
        gaussian_copula_members(ndtri, np.eye(3), 4, rng)  # type: ignore[arg-type]
    too_big = GaussianCopula(np.zeros((MAX_COPULA_COMPONENTS + 1, 1)), 0.0, 3)  # only .shape[0] is read
    with pytest.raises(EnsmlError, match="cap of 8192"):
        gaussian_copula_members(ndtri, too_big, 4, rng)
