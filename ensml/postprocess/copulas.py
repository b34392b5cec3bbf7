"""Two-step multivariate baselines: calibrated margins first, then a dependence structure.

A per-point post-processor gives a predictive distribution at every component (grid point,
variable, lead) but no joint distribution. The two-step methods that a generative
post-processor is compared against (Chen, Janke, Steinke and Lerch 2024, Ann. Appl. Stat. 18,
"Generative machine learning methods for multivariate ensemble postprocessing") restore the
dependence with a copula:

- ECC-Q (:mod:`ensml.postprocess.ecc`): the raw ensemble members' ranks (Schefzik,
  Thorarinsdottir and Gneiting 2013, Statistical Science 28, 616–640).
- The Schaake shuffle (:func:`schaake_shuffle`; Clark et al. 2004, J. Hydrometeor. 5,
  243–262): the ranks of N past observation vectors, e.g. the verifying analyses of N dates
  of the training period. The empirical copula is the observed one, not the model's.
- A Gaussian copula (:func:`fit_gaussian_copula`, :func:`gaussian_copula_members`; Möller,
  Lenkoski and Thorarinsdottir 2013, QJRMS 139, 982–991): a D×D correlation matrix of the
  normal scores Φ⁻¹(F_t(y_t)) of past observations, sampled and mapped through the margins.

Shapes: members (samples) on ``axis`` (by default the second last), components on the last
axis, any leading axes (cases, leads) broadcast. Arrays are numpy, float32 or float64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.special import ndtr, ndtri

from ensml.errors import EnsmlError
from ensml.postprocess.ecc import ecc_ranks

#: The most components a Gaussian copula takes: its D×D correlation matrix is 0.5 GB in float64
#: at 8192 (3.2 GB at 20,000), and fitting holds about three such matrices at once.
MAX_COPULA_COMPONENTS = 8192
#: The least optimal shrinkage with no more cases than components (the sample correlation is
#: then singular; with 2 cases every estimated correlation is ±1 and the optimal weight 0).
MIN_SINGULAR_SHRINKAGE = 1e-3
# The smallest squared Cholesky pivot of a correlation matrix taken as positive definite.
_MIN_PIVOT = 1e-10


def schaake_shuffle(
    samples: np.ndarray,
    templates: np.ndarray,
    axis: int = -2,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Reorder N marginal samples at every component into the rank order of N template vectors.

    At every component the sorted samples are placed so that member j has the rank that
    template vector j has there (Clark et al. 2004): member j's value is the k-th smallest
    sample where template j is the k-th smallest template value. The margins are kept exactly
    (each component's multiset of values is unchanged) and the members' rank (Spearman)
    dependence between components is the templates'.

    Parameters
    ----------
    samples
        N draws or quantiles of the marginal predictive distribution per component, shape
        (..., N, D) with the members on ``axis`` (N) and the components on the other axes.
        Need not be sorted. NaN is refused.
    templates
        N observation vectors, e.g. the verifying analyses of N past dates, shape (N, D) or any
        shape that broadcasts against ``samples`` with N on the same ``axis`` (counted from the
        end): one template for all leading cases, or one per case. NaN (a missing observation)
        is refused: choose the dates where every component was observed.
    axis
        The member axis of ``samples`` (default −2: (..., N, D)).
    rng
        Breaks ties among template values (e.g. several dry dates of precipitation) at random,
        reproducibly for a seeded generator; None: by member (template) order.

    Returns
    -------
    numpy.ndarray
        The shape and dtype of ``samples``; sorted along ``axis`` it equals ``samples`` sorted.
    """
    samples = np.asarray(samples)
    templates = np.asarray(templates)
    if samples.ndim < 1 or not -samples.ndim <= axis < samples.ndim:
        raise EnsmlError(f"Schaake shuffle: member axis {axis} is outside samples of shape {samples.shape}")
    axis = axis - samples.ndim if axis >= 0 else axis  # counted from the end, as for the templates
    n = samples.shape[axis]
    if templates.ndim < -axis or templates.shape[axis] != n:
        raise EnsmlError(
            f"Schaake shuffle: templates of shape {templates.shape} do not give {n} members on axis "
            f"{axis} of samples {samples.shape}"
        )
    try:
        shape = np.broadcast_shapes(samples.shape, templates.shape)
    except ValueError:
        shape = None
    if shape != samples.shape:
        raise EnsmlError(
            f"Schaake shuffle: templates of shape {templates.shape} do not broadcast against samples "
            f"{samples.shape} (members on axis {axis}, components after)"
        )
    _refuse_nan("Schaake shuffle: samples", samples)
    _refuse_nan("Schaake shuffle: templates", templates)
    tiebreak = None if rng is None else rng.random(templates.shape)
    ranks = np.broadcast_to(ecc_ranks(templates, axis, tiebreak), samples.shape)
    return np.take_along_axis(np.sort(samples, axis=axis), ranks, axis=axis)


@dataclass(frozen=True, eq=False)
class GaussianCopula:
    """A fitted Gaussian copula: the Cholesky factor L of its D×D correlation matrix R = L Lᵀ.

    Attributes
    ----------
    cholesky
        Lower-triangular L, shape (D, D), float64, read-only.
    shrinkage
        The weight λ of the identity in R = (1 − λ) C + λ I (C: the sample correlation).
    n_cases
        The number of training cases C was estimated from (rows without NaN).
    """

    cholesky: np.ndarray
    shrinkage: float
    n_cases: int

    @property
    def dim(self) -> int:
        """The number of components D."""
        return self.cholesky.shape[0]

    @property
    def correlation(self) -> np.ndarray:
        """The correlation matrix R = L Lᵀ, shape (D, D) (computed on each access)."""
        return self.cholesky @ self.cholesky.T


def pit_normal_scores(pit: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Φ⁻¹(u) of PIT values u = F_t(y_t), clipped to [eps, 1 − eps] so that an observation
    outside a margin's support (u = 0 or 1) gives a finite score. NaN stays NaN."""
    return ndtri(np.clip(np.asarray(pit, dtype=np.float64), eps, 1.0 - eps))


def fit_gaussian_copula(normal_scores: np.ndarray, shrinkage: float | None = None) -> GaussianCopula:
    """Estimate a Gaussian copula from T training cases of normal scores.

    The sample correlation C of the cases is shrunk toward the identity,
    R = (1 − λ) C + λ I, which keeps R a correlation matrix and makes it positive definite with
    smallest eigenvalue at least λ when λ > 0, also when T ≤ D (where C is singular).

    Parameters
    ----------
    normal_scores
        Shape (T, D): per training case t and component, Φ⁻¹(F_t(y_t)), the PIT of the
        observation under the marginal predictive distribution in normal-score space
        (:func:`pit_normal_scores`). Rows with a NaN (a missing observation) are dropped; at least
        2 cases must remain. D is at most :data:`MAX_COPULA_COMPONENTS`. A component constant
        over the cases (e.g. its PIT clipped at 0 or 1 in every case) says nothing of its
        dependence: it is independent of the others (its row of R is the identity's).
    shrinkage
        λ in [0, 1]: 0 gives the sample correlation, 1 the identity (independent components).
        None (the default): the closed-form optimal weight of Schäfer and Strimmer (2005, Stat.
        Appl. Genet. Mol. Biol. 4, 32; their target D, the Ledoit–Wolf estimate for a
        correlation matrix shrunk toward the identity),
        λ* = Σ_{i≠j} Var̂(c_ij) / Σ_{i≠j} c_ij², clipped to [0, 1]: small when T ≫ D; at least
        :data:`MIN_SINGULAR_SHRINKAGE` when T ≤ D.

    Returns
    -------
    GaussianCopula
        Its Cholesky factor, the λ used and the number of cases.
    """
    x = np.asarray(normal_scores, dtype=np.float64)
    if x.ndim != 2:
        raise EnsmlError(f"Gaussian copula: normal scores must have shape (cases, components), got {x.shape}")
    _check_dim(x.shape[1])
    if shrinkage is not None and not 0.0 <= shrinkage <= 1.0:
        raise EnsmlError(f"Gaussian copula: shrinkage must be in [0, 1] or None, got {shrinkage}")
    x = x[~np.isnan(x).any(axis=1)]
    t, d = x.shape
    if t < 2:
        raise EnsmlError(
            f"Gaussian copula: {t} training case(s) without missing values; at least 2 are needed "
            f"(of {np.shape(normal_scores)[0]} given)"
        )
    if not np.isfinite(x).all():
        raise EnsmlError(
            "Gaussian copula: infinite normal scores (a PIT of exactly 0 or 1); clip the PIT "
            "inside (0, 1) first, e.g. with ensml.postprocess.copulas.pit_normal_scores"
        )
    x = x - x.mean(axis=0)
    std = x.std(axis=0, ddof=1)
    constant = std == 0  # no information about their dependence: independent of the others
    x /= np.where(constant, 1.0, std)
    corr = x.T @ x / (t - 1)
    np.fill_diagonal(corr, 1.0)
    lam = float(shrinkage) if shrinkage is not None else _optimal_shrinkage(x, corr)
    if shrinkage is None and t <= d:  # C is singular: some shrinkage is needed, whatever the estimate
        lam = max(lam, MIN_SINGULAR_SHRINKAGE)
    corr *= 1.0 - lam
    corr[np.diag_indices(d)] = 1.0
    try:
        chol = scipy.linalg.cholesky(corr, lower=True, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError:
        chol = None
    # The squared pivots bound the smallest eigenvalue from above: a tiny one means a numerically
    # singular matrix (C of rank < D when T ≤ D) that Cholesky may pass or fail by rounding.
    if chol is None or np.diag(chol).min() ** 2 < _MIN_PIVOT:
        raise EnsmlError(
            f"Gaussian copula: the correlation of {d} components from {t} cases is not positive "
            f"definite with shrinkage {lam:g}; use a larger shrinkage (or None, the optimal one)"
        )
    chol.flags.writeable = False
    return GaussianCopula(cholesky=chol, shrinkage=lam, n_cases=t)


def gaussian_copula_members(
    quantile_function: Callable[[np.ndarray], np.ndarray],
    copula: GaussianCopula,
    n: int,
    rng: np.random.Generator,
    batch_shape: tuple[int, ...] = (),
) -> np.ndarray:
    """N members with the margins' distributions and the Gaussian copula's dependence.

    Draws z ~ N(0, R) (independent across members and cases), takes u = Φ(z) and returns
    ``quantile_function(u)``. The members are exchangeable (there is no member order, unlike
    ECC-Q's or the Schaake shuffle's); each is an exact draw from the joint distribution whose
    margins are exactly the predictive distributions and whose copula is the Gaussian one with
    correlation R (the Spearman correlation of components i and j is (6/π) asin(R_ij/2)).

    Parameters
    ----------
    quantile_function
        The margins' quantile functions, vectorised: maps probabilities of shape
        (*batch_shape, n, D) in (0, 1) to values of the same shape, component d by the
        quantile function of component d (and case by case along the batch axes).
    copula
        From :func:`fit_gaussian_copula`, with D components.
    n
        Number of members, at least 1.
    rng
        The random generator; a seeded one makes the members reproducible.
    batch_shape
        Leading axes, e.g. (cases,) or (leads, cases): the members of each case are drawn
        independently.

    Returns
    -------
    numpy.ndarray
        Shape (*batch_shape, n, D), what ``quantile_function`` returns.
    """
    if not isinstance(copula, GaussianCopula):
        raise EnsmlError(f"Gaussian copula members: expected a GaussianCopula, got {type(copula).__name__}")
    _check_dim(copula.dim)
    if n < 1:
        raise EnsmlError(f"Gaussian copula members: the number of members must be at least 1, got {n}")
    shape = (*batch_shape, n, copula.dim)
    z = rng.standard_normal(shape) @ copula.cholesky.T
    # Keep u inside (0, 1): Φ(z) rounds to 1 for z > 8.3, where an unbounded margin's quantile
    # is infinite.
    u = np.clip(ndtr(z), np.finfo(np.float64).tiny, 1.0 - np.finfo(np.float64).epsneg)
    members = np.asarray(quantile_function(u))
    if members.shape != shape:
        raise EnsmlError(
            f"Gaussian copula members: the quantile function gave shape {members.shape} for "
            f"probabilities of shape {shape}"
        )
    _refuse_nan("Gaussian copula members: the quantile function's values", members)
    return members


def _optimal_shrinkage(x: np.ndarray, corr: np.ndarray) -> float:
    """Schäfer–Strimmer λ* for standardised cases ``x`` (T, D) and their correlation ``corr``.

    With w_tij = x_ti x_tj and w̄_ij = Σ_t w_tij / T = (T − 1)/T c_ij,
    Var̂(c_ij) = T/(T − 1)³ Σ_t (w_tij − w̄_ij)² and Σ_t (w_tij − w̄_ij)² = Σ_t x_ti² x_tj² − (T − 1)²/T c_ij².
    Only sums over i ≠ j are needed: Σ_ij Σ_t x_ti² x_tj² = Σ_t (Σ_i x_ti²)², so no second D×D
    matrix is made.
    """
    t, d = x.shape
    if d == 1:
        return 0.0
    squares = x * x
    sum_w2 = float((squares.sum(axis=1) ** 2).sum() - (squares * squares).sum())  # i ≠ j
    sum_c2 = float(np.vdot(corr, corr)) - d  # i ≠ j (the diagonal is 1)
    if sum_c2 <= 0.0:
        return 1.0
    total_var = t / (t - 1) ** 3 * (sum_w2 - (t - 1) ** 2 / t * sum_c2)
    return float(np.clip(total_var / sum_c2, 0.0, 1.0))


def _check_dim(d: int) -> None:
    if d < 1:
        raise EnsmlError("Gaussian copula: there must be at least 1 component, got 0")
    if d > MAX_COPULA_COMPONENTS:
        raise EnsmlError(
            f"Gaussian copula: {d} components exceed the cap of {MAX_COPULA_COMPONENTS} (its "
            f"{d}×{d} correlation matrix is {d * d * 8 / 1e9:.1f} GB); score regions or a thinned "
            f"grid, or fit one copula per tile of at most {MAX_COPULA_COMPONENTS} points"
        )


def _refuse_nan(what: str, values: np.ndarray) -> None:
    if np.issubdtype(values.dtype, np.floating) and (bad := int(np.isnan(values).sum())):
        raise EnsmlError(f"{what} have {bad} NaN value(s) of {values.size}")
