"""Ensemble calibration: spread-skill ratio, rank and PIT histograms and their flatness;
ensemble-mean bias and RMSE.

PIT histograms: of Gaussian forecasts (:func:`pit_histogram`, as a rank histogram among their
quantiles), or of PIT values of any forecast (:func:`pit_value_histogram`, e.g. the randomised
PIT of a censored distribution, :func:`ensml.scores.predictive.pit_family`).

NaN/Inf as every ensml score (:mod:`ensml.scores`): NaN members are dropped from means and
variances; the rank histogram, which ranks among all M members, leaves out a point with any
NaN member; ±Inf is an error.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores.reduce import check_fcst_obs, check_weights, reduce_score, resolve_reduce_dims

__all__ = [
    "ensemble_mean_bias",
    "ensemble_mean_rmse",
    "histogram_flatness",
    "observation_ranks",
    "pit_histogram",
    "pit_value_histogram",
    "rank_histogram",
    "spread_skill_fields",
    "spread_skill_ratio",
    "spread_skill_terms",
]

RANK = "rank"


def _member_mean(fcst: xr.DataArray, member_dim: str) -> xr.DataArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN points give NaN
        return fcst.mean(member_dim, skipna=True)


def ensemble_mean_bias(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Mean error of the ensemble mean, :math:`\overline{\bar x - y}` (forecast minus observation).

    NaN members are dropped from the mean; points without a valid member or observation are
    left out of the (weighted) average; ±Inf is an error.
    """
    fcst, obs = check_fcst_obs(fcst, obs, "ensemble_mean_bias", member_dim)
    err = _member_mean(fcst, member_dim) - obs
    out = reduce_score(
        err, reduce_dims=reduce_dims, preserve_dims=preserve_dims, weights=weights, func="ensemble_mean_bias"
    )
    return out.rename("bias").assign_attrs({k: v for k, v in obs.attrs.items() if k == "units"})


def ensemble_mean_rmse(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""RMSE of the ensemble mean, :math:`\sqrt{\overline{(\bar x - y)^2}}`.

    The square root is taken after the (weighted) mean over the reduced dims, as in
    WeatherBench2; NaN handling as :func:`ensemble_mean_bias`.
    """
    fcst, obs = check_fcst_obs(fcst, obs, "ensemble_mean_rmse", member_dim)
    se = (_member_mean(fcst, member_dim) - obs) ** 2
    mse = reduce_score(
        se, reduce_dims=reduce_dims, preserve_dims=preserve_dims, weights=weights, func="ensemble_mean_rmse"
    )
    return np.sqrt(mse).rename("rmse").assign_attrs({k: v for k, v in obs.attrs.items() if k == "units"})


def spread_skill_ratio(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    finite_ensemble_correction: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Spread-skill ratio: ensemble spread over the RMSE of the ensemble mean.

    .. math::
        \mathrm{SSR} = \sqrt{\overline{c\, s^2}} \,/\, \sqrt{\overline{(\bar x - y)^2}},
        \qquad s^2 = \frac{1}{M-1}\sum_i (x_i - \bar x)^2

    with the bar a (weighted) mean over the reduced dims, over points where both terms are
    valid (:func:`spread_skill_terms`). ``c = 1`` by default; with
    ``finite_ensemble_correction=True``, ``c = (M+1)/M``: for M members exchangeable with the
    truth, ``E(\bar x - y)^2 = (M+1)/M\, \sigma^2``, so a perfect ensemble then has SSR = 1
    (Fortin et al. 2014, J. Hydrometeor. 15, 1708). M counts each point's valid members; points
    with fewer than two are left out.
    """
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    spread, mse = _terms(fcst, obs, member_dim, finite_ensemble_correction, kw, "spread_skill_ratio")
    return np.sqrt(spread / mse).rename("spread_skill_ratio").assign_attrs(units="1")


def spread_skill_terms(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    finite_ensemble_correction: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> tuple[xr.DataArray, xr.DataArray]:
    r"""The two means of :func:`spread_skill_ratio`: :math:`\overline{c\, s^2}` and
    :math:`\overline{(\bar x - y)^2}`, over the points where both are valid; the ratio is the
    square root of their quotient. Kept apart, e.g. per init time, so that a bootstrap over init
    times resamples the terms rather than the ratios."""
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    return _terms(fcst, obs, member_dim, finite_ensemble_correction, kw, "spread_skill_terms")


def _terms(
    fcst: xr.DataArray, obs: xr.DataArray, member_dim: str, correction: bool, kw: dict, func: str
) -> tuple[xr.DataArray, xr.DataArray]:
    var, se = _pointwise_terms(fcst, obs, member_dim, correction, func)
    return reduce_score(var, **kw, func=func), reduce_score(se, **kw, func=func)


def spread_skill_fields(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    finite_ensemble_correction: bool = False,
) -> tuple[xr.DataArray, xr.DataArray]:
    r"""The pointwise terms of :func:`spread_skill_ratio`, before any mean: :math:`c\, s^2` and
    :math:`(\bar x - y)^2`, each NaN where either is (a point with fewer than two valid members
    or a NaN observation). Their (weighted) means over the reduced dims are
    :func:`spread_skill_terms`; kept pointwise, they can be summed over blocks of init times
    (``ensml report --cluster``)."""
    return _pointwise_terms(fcst, obs, member_dim, finite_ensemble_correction, "spread_skill_fields")


def _pointwise_terms(
    fcst: xr.DataArray, obs: xr.DataArray, member_dim: str, correction: bool, func: str
) -> tuple[xr.DataArray, xr.DataArray]:
    fcst, obs = check_fcst_obs(fcst, obs, func, member_dim)
    if fcst.sizes[member_dim] < 2:
        raise EnsmlError(f"{func}: needs at least 2 members along '{member_dim}'")
    m = fcst.notnull().sum(member_dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        var = fcst.var(member_dim, ddof=1, skipna=True).where(m > 1)
    if correction:
        var = var * (m + 1) / m
    se = (_member_mean(fcst, member_dim) - obs) ** 2
    ok = var.notnull() & se.notnull()
    return var.where(ok), se.where(ok)


def _ranks(fc: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
    # members on the last axis; rank = #below + uniform share of the ties, -1 where invalid
    below = (fc < y[..., None]).sum(-1)
    ties = (fc == y[..., None]).sum(-1)
    rank = below + np.floor(u * (ties + 1)).astype(np.int64)
    bad = np.isnan(fc).any(-1) | np.isnan(y)
    return np.where(bad, -1, rank)


def rank_histogram(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    seed: int = 0,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    """Rank (Talagrand) histogram: counts of the observation's rank among the M members.

    The rank is the number of members below the observation, 0 … M; ties between the
    observation and members are broken uniformly at random (Hamill 2001, Mon. Wea. Rev. 129,
    550) with a generator seeded by ``seed``, so the result is reproducible for a given
    chunking. Points with any NaN member or a NaN observation are left out (their rank would
    be among fewer members); ±Inf is an error. A flat histogram indicates a calibrated ensemble.

    Returns
    -------
    xr.DataArray
        float64 counts (weighted sums when ``weights`` are given) over the reduced dims, with a
        new ``rank`` dim of length M + 1; NaN (not 0) in every rank where the reduced slice has
        no valid point.
    """
    fcst, obs = check_fcst_obs(fcst, obs, "rank_histogram", member_dim)
    m = fcst.sizes[member_dim]
    if obs.chunks is not None or fcst.chunks is not None:
        import dask.array as da

        obs = obs.chunk()
        u_data = da.random.default_rng(seed).random(obs.shape, chunks=obs.chunks)
        fcst = fcst.chunk({member_dim: -1})
    else:
        u_data = np.random.default_rng(seed).random(obs.shape)
    rank = _observation_ranks(fcst, obs, obs.copy(data=u_data), member_dim)
    dims = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, "rank_histogram")
    ranks = xr.DataArray(np.arange(m + 1), dims=[RANK], coords={RANK: np.arange(m + 1)})
    hit = (rank == ranks).astype(np.float64)
    if weights is not None:
        hit = hit * check_weights(weights, rank, "rank_histogram")
    out = hit.sum(dims).where((rank >= 0).any(dims))  # no valid point: NaN, not a row of zeros
    return out.rename("rank_histogram").assign_attrs(units="1", long_name="rank histogram count")


def observation_ranks(
    fcst: xr.DataArray, obs: xr.DataArray, tie_breaks: xr.DataArray, *, member_dim: str = MEMBER
) -> xr.DataArray:
    """The rank of the observation among the M members at each point, as :func:`rank_histogram`
    counts them: the number of members below it plus a uniform share of the ties, drawn from
    ``tie_breaks`` (uniform numbers in [0, 1), shaped as ``obs``); -1 where any member or the
    observation is NaN. Given its own draws, a caller can rank blocks of a field apart and get
    the ranks of the whole (``ensml report --cluster`` draws them per init time)."""
    fcst, obs = check_fcst_obs(fcst, obs, "observation_ranks", member_dim)
    return _observation_ranks(fcst, obs, tie_breaks, member_dim)


def _observation_ranks(
    fcst: xr.DataArray, obs: xr.DataArray, tie_breaks: xr.DataArray, member_dim: str
) -> xr.DataArray:
    return xr.apply_ufunc(
        _ranks,
        fcst,
        obs,
        tie_breaks,
        input_core_dims=[[member_dim], [], []],
        dask="parallelized",
        output_dtypes=[np.int64],
    ).rename("observation_rank")


def pit_histogram(
    mu: xr.DataArray,
    sigma: xr.DataArray,
    obs: xr.DataArray,
    *,
    bins: int,
    seed: int = 0,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""PIT histogram of Gaussian forecasts :math:`N(\mu, \sigma^2)`: counts of
    :math:`\Phi((y - \mu) / \sigma)` in ``bins`` equal bins of [0, 1].

    Computed as the :func:`rank_histogram` of the observation among the ``bins - 1`` quantiles
    :math:`\mu + \sigma\, \Phi^{-1}(i / B)`, i = 1 … B − 1, as ``benchmarks/pruning.py``'s PIT
    histogram: with B = M + 1 it is comparable bin for bin with the rank histogram of an
    M-member ensemble. A point with sigma 0 has all quantiles at mu (ties broken at random, as
    :func:`rank_histogram` does). Returns float64 counts with a ``rank`` dim of length B.
    """
    from statistics import NormalDist

    if bins < 2:
        raise EnsmlError(f"pit_histogram: needs at least 2 bins, got {bins}")
    z = [NormalDist().inv_cdf(i / bins) for i in range(1, bins)]
    quantiles = mu + sigma * xr.DataArray(np.asarray(z), dims=[MEMBER])
    out = rank_histogram(
        quantiles,
        obs,
        member_dim=MEMBER,
        seed=seed,
        reduce_dims=reduce_dims,
        preserve_dims=preserve_dims,
        weights=weights,
    )
    return out.rename("pit_histogram").assign_attrs(long_name="PIT histogram count")


def pit_value_histogram(
    pit: xr.DataArray,
    *,
    bins: int,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""PIT histogram of PIT values: counts of ``pit`` in ``bins`` equal bins of [0, 1].

    Bin r (0 … B − 1) holds :math:`r/B \le \mathrm{PIT} < (r + 1)/B`, the last one closed at 1.
    For any forecast whose PIT is uniform when it is calibrated: a continuous one's
    :math:`F(y)`, or the randomised PIT of a forecast with a point mass (Czado, Gneiting & Held
    2009; :func:`ensml.scores.predictive.pit_family`), where :math:`F(y)` alone would pile up
    dry days in the lowest bins. With B = M + 1 it is comparable bin for bin with the rank
    histogram of an M-member ensemble (:func:`rank_histogram`), and :func:`histogram_flatness`
    measures it alike. NaN values are left out; a reduced slice with none valid gives NaN in
    every bin.

    Returns
    -------
    xr.DataArray
        float64 counts (weighted sums with ``weights``) with a ``rank`` dim of length ``bins``,
        as :func:`pit_histogram`.
    """
    func = "pit_value_histogram"
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 2:
        raise EnsmlError(f"{func}: needs an integer number of bins >= 2, got {bins!r}")
    if not isinstance(pit, xr.DataArray):
        raise EnsmlError(f"{func}: pit must be a DataArray")
    if pit.chunks is None and bool(((pit < 0) | (pit > 1)).any()):
        raise EnsmlError(f"{func}: PIT values must lie in [0, 1]")
    index = np.minimum(np.floor(pit * bins), bins - 1)
    ranks = xr.DataArray(np.arange(bins), dims=[RANK], coords={RANK: np.arange(bins)})
    hit = (index == ranks).astype(np.float64)
    if weights is not None:
        hit = hit * check_weights(weights, pit, func)
    dims = resolve_reduce_dims(pit.dims, reduce_dims, preserve_dims, func)
    out = hit.sum(dims).where(pit.notnull().any(dims))
    return out.rename("pit_histogram").assign_attrs(units="1", long_name="PIT histogram count")


def histogram_flatness(counts: xr.DataArray | np.ndarray, dim: str = RANK) -> xr.DataArray | np.ndarray:
    r"""Flatness of a rank or PIT histogram: :math:`\frac1B \sum_r |h_r / \bar h - 1|`.

    The mean absolute deviation of the B bins' counts from their mean, relative to it: 0 for a
    flat histogram, :math:`2 (B - 1) / B` when every count falls in one bin. The "PIT flatness"
    of ``benchmarks/pruning.py``. A finite sample of a calibrated forecast is not exactly flat:
    with N independent points the expected value is about :math:`\sqrt{2 (B - 1) / (\pi N)}`.

    ``counts``: a DataArray with the bins along ``dim`` (:func:`rank_histogram`), or an array
    with them on its last axis.
    """
    if isinstance(counts, xr.DataArray):
        out = abs(counts / counts.mean(dim) - 1).mean(dim)
        return out.rename("flatness").assign_attrs(units="1")
    h = np.asarray(counts, dtype=float)
    mean = h.sum(-1, keepdims=True) / h.shape[-1]  # sums, not np.mean: called per bootstrap resample
    return np.abs(h - mean).sum(-1) / (mean[..., 0] * h.shape[-1])
