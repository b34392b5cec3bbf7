"""Ensemble copula coupling, and the Gaussian's quantiles and exceedance probabilities.

Ensemble copula coupling (ECC-Q; Schefzik, Thorarinsdottir and Gneiting 2013, Statistical
Science 28, 616–640): at every point, N equidistant quantiles of the calibrated predictive
distribution are reordered by the rank order of the raw members there, so that the calibrated
members keep the raw ensemble's spatial, inter-variable and temporal structure (member j is
the highest calibrated value wherever raw member j is the highest raw value).
:func:`ecc_quantile_members` couples the quantiles of any predictive distribution (given as a
quantile function or as the N quantiles); :func:`ecc_members` is its Gaussian case.

Ties among the raw members (dry members of precipitation, all 0; calm wind) carry no order to
keep. Given a random generator, they are broken at random, as Schefzik et al. (2013)
recommend, so that no member is systematically the driest of the tied; without one, by
member order (the order before random tie-breaking existed; for continuous variables a tie is a
coincidence of rounding). A seeded generator makes the random order reproducible.

Arrays are numpy, float32 or float64; the member axis is an argument, everything else
broadcasts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import ndtr, ndtri

from ensml.errors import EnsmlError
from ensml.postprocess.options import EccSpacing


def ecc_levels(n: int, spacing: EccSpacing = "centred") -> np.ndarray:
    """The N probability levels of ECC-Q.

    ``"centred"``: (i − ½)/N, i = 1 … N, the N-point approximation of a distribution with the
    smallest CRPS (Bröcker 2012, QJRMS 138, 1611–1617): at 10 members its empirical CRPS exceeds
    the Gaussian's by 0.7% for a calibrated forecast. ``"rank"``: i/(N + 1), the levels of
    Schefzik et al. (2013), 1.3% at 10 members.
    """
    if n < 1:
        raise EnsmlError(f"the number of ECC members must be at least 1, got {n}")
    i = np.arange(1, n + 1, dtype=np.float64)
    if spacing == "centred":
        return (i - 0.5) / n
    if spacing == "rank":
        return i / (n + 1)
    raise EnsmlError(f"ECC spacing must be 'centred' or 'rank', got {spacing!r}")


def gaussian_quantiles(mu: np.ndarray, sigma: np.ndarray, levels: np.ndarray, axis: int = 0) -> np.ndarray:
    """Quantiles μ + σ Φ⁻¹(p) of N(μ, σ²) at probability ``levels``, stacked along ``axis``.

    ``mu`` and ``sigma`` have the same shape S; the result has S with ``len(levels)`` inserted
    at ``axis``, in the dtype of ``mu``.
    """
    z = ndtri(np.asarray(levels, dtype=np.float64))
    shape = [1] * (np.ndim(mu) + 1)
    shape[axis] = z.size
    z = z.reshape(shape)
    mu, sigma = np.expand_dims(mu, axis), np.expand_dims(sigma, axis)
    return (mu + sigma * z).astype(np.result_type(mu, np.float32), copy=False)


def exceedance(mu: np.ndarray, sigma: np.ndarray, thresholds: np.ndarray, axis: int = 0) -> np.ndarray:
    """P(X > t) = Φ((μ − t)/σ) for X ~ N(μ, σ²), one per threshold stacked along ``axis``.

    ``thresholds`` is 1-D (the same at every point) or broadcasts against ``mu`` once expanded at
    ``axis``. Values are in [0, 1], float32 unless ``mu`` is float64.
    """
    t = np.asarray(thresholds, dtype=np.float64)
    if t.ndim == 1:
        shape = [1] * (np.ndim(mu) + 1)
        shape[axis] = t.size
        t = t.reshape(shape)
    mu, sigma = np.expand_dims(mu, axis), np.expand_dims(sigma, axis)
    p = ndtr((mu.astype(np.float64) - t) / sigma)
    return p.astype(np.result_type(mu, np.float32), copy=False)


def ecc_template(raw: np.ndarray, n: int, axis: int) -> np.ndarray:
    """The N-member dependence template taken from the M raw members along ``axis``.

    N = M: the raw members; N < M: the first N; N > M: the raw members repeated (member j
    serves as members j, j + M, j + 2M, …), with ties between the copies broken by member order,
    so the copies of one raw member take adjacent calibrated quantiles.
    """
    m = raw.shape[axis]
    if n <= m:
        return np.take(raw, np.arange(n), axis=axis)
    return np.take(raw, np.arange(n) % m, axis=axis)


def ecc_ranks(template: np.ndarray, axis: int, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Rank (0 … N−1) of each template member at each point.

    Ties are broken by ``tiebreak`` (same shape as ``template``, e.g. uniform random keys), and
    where that ties too (or is None) by member order.
    """
    if tiebreak is None:
        # The rank of each member is the position of its index in the sorted order.
        order = np.argsort(template, axis=axis, kind="stable")
        return np.argsort(order, axis=axis, kind="stable")
    # Sort by the tie-break first, then stably by value: equal values keep the tie-break's order.
    shuffle = np.argsort(tiebreak, axis=axis, kind="stable")
    order = np.argsort(np.take_along_axis(template, shuffle, axis=axis), axis=axis, kind="stable")
    order = np.take_along_axis(shuffle, order, axis=axis)
    return np.argsort(order, axis=axis, kind="stable")


def ecc_quantile_members(
    quantiles: Callable[[np.ndarray], np.ndarray] | np.ndarray,
    raw: np.ndarray,
    n: int | None = None,
    spacing: EccSpacing = "centred",
    axis: int = 0,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """ECC-Q members of any predictive distribution, in the rank order of the raw ensemble.

    Parameters
    ----------
    quantiles
        The predictive distribution: a function of the N probability levels (1-D) giving its
        quantiles stacked along ``axis`` (shape S with N inserted at ``axis``), or those N
        quantiles already computed at :func:`ecc_levels` ``(n, spacing)``, non-decreasing along
        ``axis``.
    raw
        Raw members, shape S with the member axis inserted at ``axis`` (M members). NaN members
        rank last (numpy sorts NaN to the end).
    n
        Number of calibrated members (default M); see :func:`ecc_template` for N ≠ M.
    spacing
        Probability levels of the quantiles (:func:`ecc_levels`).
    rng
        Breaks ties among the raw members at random (the module's note); None: by member order.
        The copies of one raw member (N > M) stay adjacent, in member order.

    Returns
    -------
    numpy.ndarray
        Shape S with N members at ``axis``, in the quantiles' dtype. At every point the sorted
        members are the quantiles, and member j has the rank of template member j.
    """
    m = raw.shape[axis]
    n = m if n is None else n
    values = quantiles(ecc_levels(n, spacing)) if callable(quantiles) else np.asarray(quantiles)
    expected = (*raw.shape[:axis], n, *raw.shape[axis + 1 :])
    if values.shape != expected:
        raise EnsmlError(
            f"ECC: {n} quantiles of shape {values.shape} do not match the raw members {raw.shape} "
            f"(member axis {axis}; expected {expected})"
        )
    tiebreak = None
    if rng is not None:
        # One random key per raw member and point, shared by its copies (kept in member order).
        tiebreak = ecc_template(rng.random(raw.shape), n, axis)
    ranks = ecc_ranks(ecc_template(raw, n, axis), axis, tiebreak)
    return np.take_along_axis(values, ranks, axis=axis)


def ecc_members(
    mu: np.ndarray,
    sigma: np.ndarray,
    raw: np.ndarray,
    n: int | None = None,
    spacing: EccSpacing = "centred",
    axis: int = 0,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """ECC-Q members of N(μ, σ²) in the rank order of the raw ensemble.

    Parameters
    ----------
    mu, sigma
        Predictive mean and std, shape S (e.g. lead, variable, level, latitude, longitude).
    raw
        Raw members, shape S with the member axis inserted at ``axis`` (M members). NaN members
        rank last (numpy sorts NaN to the end).
    n
        Number of calibrated members (default M); see :func:`ecc_template` for N ≠ M.
    spacing
        Probability levels of the quantiles (:func:`ecc_levels`).
    rng
        Breaks ties among the raw members at random; None: by member order
        (:func:`ecc_quantile_members`).

    Returns
    -------
    numpy.ndarray
        Shape S with N members at ``axis``. At every point the sorted members are the quantiles
        of :func:`ecc_levels`, and member j has the rank of template member j.
    """
    expected = (*mu.shape[:axis], raw.shape[axis], *mu.shape[axis:])
    if raw.shape != expected or sigma.shape != mu.shape:
        raise EnsmlError(
            f"ECC: raw members {raw.shape} do not match the predictive mean {mu.shape} and std "
            f"{sigma.shape} (member axis {axis})"
        )

    def quantiles(levels: np.ndarray) -> np.ndarray:
        return gaussian_quantiles(mu, sigma, levels, axis=axis)  # sorted along axis

    return ecc_quantile_members(quantiles, raw, n, spacing, axis, rng)
