"""Ensemble CRPS, standard and fair, with a numpy core and an xarray/dask API.

NaN/Inf policy (that of :mod:`ensml.scores`): a NaN member is dropped (the CRPS of the remaining
members); a point with no valid member, or a NaN observation, scores NaN; the fair CRPS of a
point with a single valid member is NaN (it has no member pairs). ±Inf in the forecast or the
observation is an :class:`~ensml.errors.EnsmlError`. That check costs no pass over the input:
any infinite member or observation makes its point's kernel result non-finite, so only those
points are searched.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores import _kernels
from ensml.scores.reduce import check_fcst_obs, check_no_inf, infinite_error, reduce_score

__all__ = ["crps_ensemble", "crps_ensemble_array", "crps_pointwise"]


class _InfiniteInput(EnsmlError):
    """An infinite member or observation found by the kernel (re-described by the xarray API)."""


def _float_dtype(*arrays: np.ndarray) -> np.dtype:
    dt = np.result_type(*(a.dtype for a in arrays))
    if dt == np.float32 or dt == np.float16:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _first_inf(res: np.ndarray, f2: np.ndarray, y1: np.ndarray) -> tuple[str, int, int, int | None] | None:
    """(argument, count, point, member) of the infinite inputs, or None; f2 is (M, N), y1 (N,).

    Any infinite member or observation makes its point's kernel result non-finite, so only
    the non-finite result points are searched: no pass over the input when all is finite.
    """
    bad = np.flatnonzero(~np.isfinite(res))
    if bad.size == 0:
        return None
    inf_f = np.isinf(f2[:, bad])
    if inf_f.any():
        j = int(np.argmax(inf_f.any(0)))
        return "forecast", int(np.count_nonzero(inf_f)), int(bad[j]), int(np.argmax(inf_f[:, j]))
    inf_y = np.isinf(y1[bad])
    if inf_y.any():
        return "observation", int(np.count_nonzero(inf_y)), int(bad[np.argmax(inf_y)]), None
    return None


def crps_ensemble_array(
    fcst: Any, obs: Any, axis: int = 0, fair: bool = False, *, parallel: bool = True
) -> np.ndarray:
    r"""Ensemble CRPS of numpy arrays, point by point.

    Standard (empirical CDF) estimator, and the fair one (Ferro 2014, Q. J. R. Meteorol. Soc.
    140, 1917) with ``fair=True``:

    .. math::
        \mathrm{CRPS} = \frac1M \sum_i |x_i - y| - \frac{1}{2M^2} \sum_{i,j} |x_i - x_j|,
        \qquad
        \mathrm{fCRPS} = \frac1M \sum_i |x_i - y| - \frac{1}{2M(M-1)} \sum_{i,j} |x_i - x_j|

    computed in O(M log M) per point from the sorted members (Gneiting & Raftery 2007,
    JASA 102, 359), centred on the observation and accumulated in float64, so float32
    geopotential (~5.5e4) keeps ~1e-7 relative accuracy.

    Parameters
    ----------
    fcst : array, shape (..., M, ...)
        Ensemble with members along ``axis``.
    obs : array
        Observation, the shape of ``fcst`` without ``axis``.
    axis : int
        Member axis of ``fcst``.
    fair : bool
        Fair (unbiased for the ensemble's distribution) estimator instead of the standard.
    parallel : bool
        Use all numba threads (set ``False`` inside thread pools such as dask's).

    Returns
    -------
    np.ndarray
        CRPS in the units of ``obs``, the shape of ``obs``; float32 when both inputs are
        float32 (or float16), else float64. NaN members are dropped (see module docstring).

    Raises
    ------
    EnsmlError
        Also when the forecast or the observation holds ±Inf (the message gives the count and,
        called directly, the index of the first).
    """
    return _crps_array(fcst, obs, axis, fair, parallel, "crps_ensemble_array")


def _crps_array(
    fcst: Any,
    obs: Any,
    axis: int,
    fair: bool,
    parallel: bool,
    func: str,
    chunk: bool = False,
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> np.ndarray:
    """:func:`crps_ensemble_array`; errors name ``func`` (and an index, for ``*_array`` functions)."""
    f = np.asarray(fcst)
    y = np.asarray(obs)
    for name, a in (("forecast", f), ("observation", y)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise EnsmlError(f"{func}: {name} must be numeric, got dtype {a.dtype}")
    if f.ndim == 0:
        raise EnsmlError(f"{func}: forecast must have a member axis, got a scalar")
    if not -f.ndim <= axis < f.ndim:
        raise EnsmlError(f"{func}: member axis {axis} out of range for {f.ndim}-D forecast")
    f = np.moveaxis(f, axis, 0)
    m = f.shape[0]
    if m == 0:
        raise EnsmlError(f"{func}: forecast has no members (member axis is empty)")
    if y.shape != f.shape[1:]:
        raise EnsmlError(
            f"{func}: observation shape {y.shape} does not match forecast shape "
            f"{f.shape[1:]} without the member axis"
        )
    if fair and m < 2:
        raise EnsmlError(f"{func}: the fair CRPS needs at least 2 members, got 1")
    out_dtype = _float_dtype(f, y)
    work = np.float32 if out_dtype == np.float32 else np.float64
    f2 = f.reshape(m, -1)  # a view when the non-member axes are contiguous, else a copy
    if f2.dtype != work:
        f2 = f2.astype(work)
    y1 = np.ascontiguousarray(y, dtype=work).reshape(-1)
    if y1.size == 0:
        return np.empty(y.shape, dtype=out_dtype)
    lo, hi = bounds
    res, nbad = _kernels.crps_2d(f2, y1, bool(fair), parallel=parallel, dtype=out_dtype, lo=lo, hi=hi)
    found = _first_inf(res, f2, y1) if nbad else None
    if found:
        name, n, point, member = found
        idx = [int(i) for i in np.unravel_index(point, y.shape)]
        if member is not None:
            idx.insert(axis % f.ndim, member)  # the index in the caller's array
        where = f"index {tuple(idx)}" if func.endswith("_array") else ""
        raise _InfiniteInput(str(infinite_error(func, name, n, where, chunk=chunk)))
    return res.reshape(y.shape)


def _crps_core(
    fcst: np.ndarray, obs: np.ndarray, fair: bool, chunked: bool, func: str, bounds: tuple[float, float]
) -> np.ndarray:
    # apply_ufunc moves the member (core) dim last; dask chunks run in its threads, not numba's.
    return _crps_array(fcst, obs, -1, fair, not chunked, func, chunk=chunked, bounds=bounds)


def _in_memory(
    fcst: xr.DataArray, obs: xr.DataArray, member_dim: str, fair: bool, func: str, bounds: tuple[float, float]
) -> xr.DataArray:
    """:func:`crps_pointwise` of numpy-backed inputs on the same dims, as ``xr.apply_ufunc`` would
    return it (dims in the forecast's order, the coordinates of both without the member dim,
    conflicting ones dropped, the forecast's attrs) without its alignment pass and wrapping,
    ~0.6 ms a call."""
    dims = tuple(d for d in fcst.dims if d != member_dim)
    f = fcst.transpose(*dims, member_dim)
    o = obs.transpose(*dims)
    res = _crps_array(f.data, o.data, -1, fair, True, func, bounds=bounds)
    coords = {k: v.variable for k, v in o.coords.items()}
    for k, v in f.coords.items():
        if member_dim in v.dims:
            continue
        if k not in coords:
            coords[k] = v.variable
        elif k not in dims and not coords[k].equals(v.variable):
            del coords[k]  # a scalar or auxiliary coordinate that disagrees
    name = fcst.name if fcst.name == obs.name else None
    return xr.DataArray(res, dims=dims, coords=coords, name=name, attrs=dict(fcst.attrs))


def crps_pointwise(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    fair: bool = False,
    func: str = "crps_pointwise",
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> xr.DataArray:
    """Unreduced ensemble CRPS of aligned DataArrays (lazy, chunk by chunk, under dask).

    NaN/Inf as :func:`crps_ensemble_array`; ``func`` names the caller in error messages.
    ``bounds=(lo, hi)`` scores ``min(max(x, lo), hi)`` of members and observation alike (the
    chaining function of the threshold-weighted CRPS), applied inside the kernel.
    """
    chunked = fcst.chunks is not None or obs.chunks is not None
    if chunked and fcst.chunks is not None:
        fcst = fcst.chunk({member_dim: -1})  # each chunk needs all members
    out_dtype = _float_dtype(np.empty(0, fcst.dtype), np.empty(0, obs.dtype))
    try:
        if not chunked and set(obs.dims) == set(fcst.dims) - {member_dim}:
            return _in_memory(fcst, obs, member_dim, fair, func, bounds)
        return xr.apply_ufunc(
            _crps_core,
            fcst,
            obs,
            input_core_dims=[[member_dim], []],
            kwargs={"fair": fair, "chunked": chunked, "func": func, "bounds": bounds},
            dask="parallelized",
            output_dtypes=[out_dtype],
        )
    except _InfiniteInput:  # in memory: say where, by coordinates (dask: the chunk's count)
        check_no_inf(fcst, func, "forecast")
        check_no_inf(obs, func, "observation")
        raise


def crps_ensemble(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    fair: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    """Ensemble CRPS of DataArrays (see :func:`crps_ensemble_array` for the estimators).

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble forecast with the dims of ``obs`` plus ``member_dim``; numpy- or dask-backed
        (dask: scored chunk by chunk in bounded memory, the member dim in one chunk).
    obs : xr.DataArray
        Observation; coordinates are aligned with the forecast (inner join).
    member_dim : str
        Name of the member dimension.
    fair : bool
        Fair CRPS (Ferro 2014) instead of the standard estimator.
    reduce_dims, preserve_dims
        Dims to average over, or to keep (``"all"`` keeps every dim); neither: mean over all.
    weights : xr.DataArray, optional
        Weights over some of the dims, e.g. :func:`ensml.data.weights.latitude_weights`.

    Returns
    -------
    xr.DataArray
        CRPS named ``crps`` in the units of ``obs``; NaN-skipping mean over the reduced dims.
    """
    fcst, obs = check_fcst_obs(fcst, obs, "crps_ensemble", member_dim, finite=False)  # the kernel checks
    if fair and fcst.sizes[member_dim] < 2:
        raise EnsmlError(f"crps_ensemble: the fair CRPS needs at least 2 members along '{member_dim}'")
    score = crps_pointwise(fcst, obs, member_dim=member_dim, fair=fair, func="crps_ensemble")
    score = reduce_score(
        score, reduce_dims=reduce_dims, preserve_dims=preserve_dims, weights=weights, func="crps_ensemble"
    )
    attrs = {"long_name": ("fair " if fair else "") + "ensemble CRPS"}
    if "units" in obs.attrs:
        attrs["units"] = obs.attrs["units"]
    return score.rename("crps").assign_attrs(attrs)
