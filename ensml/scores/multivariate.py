r"""Multivariate ensemble scores: energy score and variogram score over a chosen set of dims.

The dims named by ``over`` (e.g. ``("latitude", "longitude")`` for a region, or
``("lead_time",)`` for a trajectory) form the vector of D components that is scored as a whole;
every other dim indexes independent cases, which are then averaged as every ensml score is
(``reduce_dims`` / ``preserve_dims``, ``weights`` over the case dims). Use these scores for
ensembles whose members carry a joint structure, raw or reordered by ECC.

NaN/Inf policy, that of :mod:`ensml.scores` carried over to vectors:

* ±Inf in the forecast or the observation is an :class:`~ensml.errors.EnsmlError`.
* **A NaN observation component is dropped from the vector**, in the observation and in every
  member, and the case is scored over its observed components. A fixed mask (sea points of a
  land-only analysis, a station without data) so drops out of every case alike; where the
  gaps vary, each case is scored on the vector it has. The score stays proper: for a given set
  of observed components it is the energy (variogram) score of the forecast's marginal on
  those components, which is proper, and a sum of proper scores is proper, provided the gaps
  do not depend on the forecast (nor, as for any missing data, on the missing values). Making
  the whole case missing would also be proper, but would discard a region for one gap; for
  that behaviour, or to average vectors of one length only (the energy score grows like √D,
  the variogram score like D²), drop incomplete cases first:
  ``obs.where(obs.notnull().all(over))``.
* **A NaN member is dropped**: a member with a NaN in any observed component is not a draw of
  the joint distribution of that vector, so the whole member goes (as a NaN member does in
  the CRPS); the score is that of the remaining members.
* A case with no observed component (the variogram score: fewer than two), or no valid member
  (fair estimators: fewer than two), scores NaN and is left out of the means.

References: Gneiting & Raftery (2007), JASA 102, 359 (energy score); Scheuerer & Hamill (2015),
Mon. Wea. Rev. 143, 1321 (variogram score); Ferro (2014), Q. J. R. Meteorol. Soc. 140, 1917
(fair estimators).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores import _mv_kernels
from ensml.scores.reduce import check_fcst_obs, reduce_score

__all__ = ["MAX_VARIOGRAM_PAIRS", "energy_score", "variogram_score", "vector_dims"]

#: Largest number of component pairs D(D-1)/2 the variogram score accepts per case (D = 14142):
#: its cost is O(M D²) per case, and ``pair_weights`` take 8 D² bytes.
MAX_VARIOGRAM_PAIRS = 10**8


def _over_arg(over: Any) -> list[Hashable]:
    return [over] if isinstance(over, str) else list(over) if over is not None else []


def vector_dims(over: Any, obs: xr.DataArray, member_dim: str, func: str) -> list[Hashable]:
    """The dims ``over`` that form the vector of a multivariate score, checked against ``obs``
    (named, distinct, not ``member_dim``, dims of ``obs``); errors name ``func``."""
    dims = _over_arg(over)
    if not dims:
        raise EnsmlError(f"{func}: over must name the dims of the vector, e.g. ('latitude', 'longitude')")
    if len(set(dims)) != len(dims):
        raise EnsmlError(f"{func}: over names a dim twice: {', '.join(map(str, dims))}")
    if member_dim in dims:
        raise EnsmlError(f"{func}: over must not contain the member dim '{member_dim}'")
    missing = [d for d in dims if d not in obs.dims]
    if missing:
        raise EnsmlError(
            f"{func}: over names {', '.join(map(str, missing))}, not dims of the observation "
            f"({', '.join(map(str, obs.dims)) or 'none'})"
        )
    return dims


def _check_case_args(
    over: list[Hashable],
    reduce_dims: Any,
    preserve_dims: Any,
    weights: xr.DataArray | None,
    func: str,
) -> None:
    # the vector dims are gone from the score: say so rather than "not among the score dims"
    for name, arg in (("reduce_dims", reduce_dims), ("preserve_dims", preserve_dims)):
        if arg is None or (isinstance(arg, str) and arg == "all"):
            continue
        inside = [d for d in ([arg] if isinstance(arg, str) else arg) if d in over]
        if inside:
            raise EnsmlError(
                f"{func}: {name} names {', '.join(map(str, inside))}, a dim of the vector (over); "
                "the score has only the case dims"
            )
    if isinstance(weights, xr.DataArray):
        inside = [d for d in weights.dims if d in over]
        if inside:
            raise EnsmlError(
                f"{func}: weights are over the cases, but have the vector dim(s) "
                f"{', '.join(map(str, inside))} (over)"
            )


def _prepare(
    fcst: xr.DataArray, obs: xr.DataArray, over: Any, member_dim: str, fair: bool, func: str
) -> tuple[xr.DataArray, xr.DataArray, list[Hashable], int]:
    fcst, obs = check_fcst_obs(fcst, obs, func, member_dim)
    dims = vector_dims(over, obs, member_dim, func)
    for name, a in (("forecast", fcst), ("observation", obs)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise EnsmlError(f"{func}: {name} must be numeric, got dtype {a.dtype}")
    if fair and fcst.sizes[member_dim] < 2:
        raise EnsmlError(f"{func}: the fair estimator needs at least 2 members along '{member_dim}'")
    d = int(np.prod([obs.sizes[x] for x in dims]))
    if d == 0:
        raise EnsmlError(f"{func}: the vector over {', '.join(map(str, dims))} has no components")
    return fcst, obs, dims, d


def _core(fcst: np.ndarray, obs: np.ndarray, n_over: int, chunked: bool, kernel: Any) -> np.ndarray:
    # apply_ufunc puts the core dims last: fcst (..., *over, M), obs (..., *over)
    case_shape = obs.shape[: obs.ndim - n_over]
    d = int(np.prod(obs.shape[obs.ndim - n_over :]))
    x = fcst.reshape((-1, d, fcst.shape[-1]))
    y = obs.reshape((-1, d))
    return kernel(x, y, parallel=not chunked).reshape(case_shape)


def _pointwise(
    fcst: xr.DataArray, obs: xr.DataArray, dims: list[Hashable], member_dim: str, kernel: Any
) -> xr.DataArray:
    chunked = fcst.chunks is not None or obs.chunks is not None
    if chunked:  # each chunk needs whole vectors and all members (numpy inputs become one chunk)
        fcst = fcst.chunk(dict.fromkeys([*dims, member_dim], -1))
        obs = obs.chunk(dict.fromkeys(dims, -1))
    return xr.apply_ufunc(
        _core,
        fcst,
        obs,
        input_core_dims=[[*dims, member_dim], list(dims)],
        kwargs={"n_over": len(dims), "chunked": chunked, "kernel": kernel},
        dask="parallelized",
        output_dtypes=[np.float64],
    )


def _finish(
    score: xr.DataArray, name: str, long_name: str, units: str | None, func: str, **kw: Any
) -> xr.DataArray:
    score = reduce_score(score, func=func, **kw)
    attrs = {"long_name": long_name}
    if units is not None:
        attrs["units"] = units
    return score.rename(name).assign_attrs(attrs)


def energy_score(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    over: str | Sequence[Hashable],
    member_dim: str = MEMBER,
    fair: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Energy score of an ensemble of vectors (Gneiting & Raftery 2007).

    .. math::
        \mathrm{ES} = \frac1M \sum_{m} \lVert \mathbf x_m - \mathbf y \rVert
        - \frac{1}{2M^2} \sum_{m, j} \lVert \mathbf x_m - \mathbf x_j \rVert ,

    :math:`\lVert\cdot\rVert` the Euclidean norm over the D components; with ``fair=True`` the
    second term is divided by :math:`2M(M-1)` instead (unbiased for the ensemble's
    distribution). One component (D = 1) gives the CRPS. Cost O(M² D) per case, computed in
    float64; memory O(M D) per thread besides the input.

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble with the dims of ``obs`` plus ``member_dim``; numpy- or dask-backed (dask:
        chunk by chunk, each chunk holding whole vectors and all members).
    obs : xr.DataArray
        Observation; coordinates are aligned with the forecast (inner join).
    over : str or sequence of str
        The dims whose values form the vector, e.g. ``("latitude", "longitude")`` or
        ``"lead_time"``; the other dims index independent cases. Components should share a
        unit (or be standardised first): the norm adds their squares.
    member_dim : str
        Name of the member dimension.
    fair : bool
        Fair estimator (Ferro 2014) instead of the standard one.
    reduce_dims, preserve_dims
        Case dims to average over, or to keep; neither: mean over all cases.
    weights : xr.DataArray, optional
        Non-negative weights over some case dims (not over ``over``).

    Returns
    -------
    xr.DataArray
        Float64 score named ``energy_score``, in the units of ``obs``, over the kept case dims.
        NaN policy: see the module docstring (NaN observation components and NaN members are
        dropped).

    Examples
    --------
    >>> energy_score(fc, obs, over=("latitude", "longitude"), preserve_dims="lead_time")  # doctest: +SKIP
    """
    func = "energy_score"
    _check_case_args(_over_arg(over), reduce_dims, preserve_dims, weights, func)
    fcst, obs, dims, _ = _prepare(fcst, obs, over, member_dim, fair, func)

    def kernel(x: np.ndarray, y: np.ndarray, parallel: bool) -> np.ndarray:
        return _mv_kernels.energy_3d(x, y, fair, parallel=parallel)

    score = _pointwise(fcst, obs, dims, member_dim, kernel)
    long_name = ("fair " if fair else "") + f"energy score over {', '.join(map(str, dims))}"
    return _finish(
        score,
        "energy_score",
        long_name,
        obs.attrs.get("units"),
        func,
        reduce_dims=reduce_dims,
        preserve_dims=preserve_dims,
        weights=weights,
    )


def _pair_weights(pair_weights: Any, d: int, dims: list[Hashable], func: str) -> np.ndarray | None:
    if pair_weights is None:
        return None
    if isinstance(pair_weights, xr.DataArray):
        pair_weights = pair_weights.values
    try:
        w = np.asarray(pair_weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EnsmlError(f"{func}: pair_weights must be a (D, D) array of numbers: {exc}") from exc
    if w.shape != (d, d):
        raise EnsmlError(
            f"{func}: pair_weights has shape {w.shape}, expected ({d}, {d}) for the D = {d} components "
            f"over {', '.join(map(str, dims))} (flattened row-major in that order)"
        )
    if not np.all(np.isfinite(w)):
        raise EnsmlError(f"{func}: pair_weights contain NaN or infinite values")
    if np.any(w < 0):
        raise EnsmlError(f"{func}: pair_weights must be >= 0 (min {w.min():.6g})")
    return w


def _power_units(units: str | None, e: float) -> str | None:
    if units is None or e == 1:
        return units
    base = f"({units})" if any(c in units for c in " /.*") else units
    return f"{base}^{e:g}"


def variogram_score(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    over: str | Sequence[Hashable],
    member_dim: str = MEMBER,
    p: float = 0.5,
    pair_weights: Any = None,
    fair: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Variogram score of order ``p`` of an ensemble of vectors (Scheuerer & Hamill 2015).

    .. math::
        \mathrm{VS}_p = \sum_{i=1}^{D} \sum_{j=1}^{D} w_{ij}
        \Big( \frac1M \sum_m |x_{m,i} - x_{m,j}|^p - |y_i - y_j|^p \Big)^2

    summed over all ordered pairs as in ``scoringrules`` (without weights, every unordered pair
    counts twice; with weights only :math:`w_{ij} + w_{ji}` matters). ``fair=True`` subtracts
    the variance of the member mean, :math:`s_{ij}^2 / M` with :math:`s_{ij}^2` the unbiased
    variance over members of :math:`|x_{m,i} - x_{m,j}|^p` (the fair kernel-score estimator of
    ``scoringrules``). The score is sensitive to the pairwise structure (e.g. the spatial
    correlation ECC restores) where the energy score is weak. Cost O(M D²) per case, memory
    O(M D) per thread: D(D-1)/2 is limited to :data:`MAX_VARIOGRAM_PAIRS`.

    Parameters
    ----------
    fcst, obs, over, member_dim, fair, reduce_dims, preserve_dims, weights
        As :func:`energy_score`.
    p : float
        Order, any finite ``p > 0``; 0.5 (the default, robust to outliers) and 1 are usual.
    pair_weights : array-like, shape (D, D), optional
        Non-negative weights of the component pairs, components flattened row-major in the order
        of ``over`` (after alignment), e.g. the inverse distance between grid points to
        down-weight remote pairs. Default: all 1.

    Returns
    -------
    xr.DataArray
        Float64 score named ``variogram_score`` in units of ``obs`` to the power ``2p``. NaN
        policy: see the module docstring (a case needs two observed components).
    """
    func = "variogram_score"
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise EnsmlError(f"{func}: p must be a number > 0, got {p!r}")
    if not (np.isfinite(p) and p > 0):
        raise EnsmlError(f"{func}: p must be a finite number > 0, got {p!r}")
    _check_case_args(_over_arg(over), reduce_dims, preserve_dims, weights, func)
    fcst, obs, dims, d = _prepare(fcst, obs, over, member_dim, fair, func)
    if d < 2:
        raise EnsmlError(f"{func}: the vector over {', '.join(map(str, dims))} has 1 component; needs 2")
    if d * (d - 1) // 2 > MAX_VARIOGRAM_PAIRS:
        raise EnsmlError(
            f"{func}: D = {d} components give {d * (d - 1) // 2:.3g} pairs per case, over the limit of "
            f"{MAX_VARIOGRAM_PAIRS:.0e} (cost O(M D²)); score smaller regions or a coarser grid"
        )
    w = _pair_weights(pair_weights, d, dims, func)
    pf = float(p)

    def kernel(x: np.ndarray, y: np.ndarray, parallel: bool) -> np.ndarray:
        return _mv_kernels.variogram_3d(x, y, pf, w, fair, parallel=parallel)

    score = _pointwise(fcst, obs, dims, member_dim, kernel)
    long_name = ("fair " if fair else "") + f"variogram score (p={pf:g}) over {', '.join(map(str, dims))}"
    return _finish(
        score,
        "variogram_score",
        long_name,
        _power_units(obs.attrs.get("units"), 2 * pf),
        func,
        reduce_dims=reduce_dims,
        preserve_dims=preserve_dims,
        weights=weights,
    )
