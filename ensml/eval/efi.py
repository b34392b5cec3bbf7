"""Extreme Forecast Index (ECMWF) against a model climate, and ENS-10's EECRPS."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Any

import numba
import numpy as np
import pandas as pd
import xarray as xr

from ensml.errors import EnsmlError
from ensml.eval.reduce import check_no_inf, check_weights, reduce_score, resolve_reduce_dims
from ensml.names import INIT_TIME, MEMBER

__all__ = ["eecrps", "extreme_forecast_index", "model_climate", "reforecast_efi"]

CLIMATE_SAMPLE = "climate_sample"


@numba.njit(cache=True, nogil=True)
def _efi_kernel(fc: np.ndarray, clim: np.ndarray) -> np.ndarray:
    n, m = fc.shape
    k = clim.shape[1]
    out = np.empty(n)
    buf = np.empty(k)
    for p in range(n):
        kk = 0
        for j in range(k):
            v = clim[p, j]
            if v == v:
                buf[kk] = v
                kk += 1
        if kk < 2:
            out[p] = np.nan
            continue
        c = np.sort(buf[:kk])
        acc = 0.0
        mm = 0
        for i in range(m):
            x = fc[p, i]
            if x != x:
                continue
            mm += 1
            # G(x): climate CDF, linear between order statistics at 0, 1/(K-1), ..., 1
            if x <= c[0]:
                u = 0.0
            elif x >= c[kk - 1]:
                u = 1.0
            else:
                j = np.searchsorted(c, x, side="right")  # c[j-1] <= x < c[j]
                lo, hi = c[j - 1], c[j]
                u = (j - 1 + (x - lo) / (hi - lo)) / (kk - 1)
            acc += math.asin(math.sqrt(u))
        if mm == 0:
            out[p] = np.nan
        else:
            out[p] = 4.0 / (math.pi * mm) * acc - 1.0
    return out


def _efi_core(fc: np.ndarray, clim: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(fc.shape[:-1], clim.shape[:-1])
    f = np.broadcast_to(fc, (*shape, fc.shape[-1])).reshape(-1, fc.shape[-1])
    c = np.broadcast_to(clim, (*shape, clim.shape[-1])).reshape(-1, clim.shape[-1])
    return _efi_kernel(np.asarray(f, np.float64), np.asarray(c, np.float64)).reshape(shape)


def extreme_forecast_index(
    fcst: xr.DataArray,
    climate: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    climate_dim: str = CLIMATE_SAMPLE,
) -> xr.DataArray:
    r"""Extreme Forecast Index of an ensemble against a model climate (ECMWF; Lalaurette 2003).

    .. math::
        \mathrm{EFI} = \frac{2}{\pi}\int_0^1 \frac{p - F_f(p)}{\sqrt{p(1-p)}}\,dp
        = \frac{4}{\pi M}\sum_{i=1}^{M} \arcsin\sqrt{G(x_i)} \; - \; 1

    where :math:`F_f(p)` is the fraction of members below the climate's p-quantile and
    :math:`G` the climate CDF (linear between the sorted climate samples, as
    ``np.quantile``'s default; 0 below and 1 above them). The closed form follows from
    :math:`F_f(p) = \frac1M\sum_i 1\{G(x_i) < p\}` and
    :math:`\int_u^1 dp/\sqrt{p(1-p)} = \pi - 2\arcsin\sqrt u`, so no quadrature is needed.
    EFI is in [−1, 1]: 1 when every member is above all of the climate, 0 when the ensemble
    is distributed as the climate.

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble with ``member_dim``.
    climate : xr.DataArray
        Model-climate samples along ``climate_dim`` (e.g. from :func:`model_climate`), over
        some of the forecast's other dims (it broadcasts over the rest).

    Returns
    -------
    xr.DataArray
        Dimensionless EFI, the forecast's dims without ``member_dim``. NaN members and
        climate samples are dropped; NaN where no member, or fewer than 2 samples, are valid;
        ±Inf in either is an error (the policy of :mod:`ensml.eval`).
    """
    for name, a in (("forecast", fcst), ("climate", climate)):
        if not isinstance(a, xr.DataArray):
            raise EnsmlError(f"extreme_forecast_index: {name} must be an xarray.DataArray")
    if member_dim not in fcst.dims:
        raise EnsmlError(f"extreme_forecast_index: forecast has no member dimension '{member_dim}'")
    if climate_dim not in climate.dims:
        raise EnsmlError(f"extreme_forecast_index: climate has no sample dimension '{climate_dim}'")
    extra = [d for d in climate.dims if d != climate_dim and d not in fcst.dims]
    if extra or member_dim in climate.dims:
        raise EnsmlError(
            f"extreme_forecast_index: climate dims ({', '.join(map(str, climate.dims))}) must be "
            f"'{climate_dim}' and forecast dims other than '{member_dim}'"
        )
    for d in climate.dims:
        if d != climate_dim and climate.sizes[d] != fcst.sizes[d]:
            raise EnsmlError(
                f"extreme_forecast_index: climate has size {climate.sizes[d]} along '{d}', "
                f"the forecast {fcst.sizes[d]}"
            )
    fcst = check_no_inf(fcst, "extreme_forecast_index", "forecast")  # G(±Inf) would count as extreme
    climate = check_no_inf(climate, "extreme_forecast_index", "climate")
    if fcst.chunks is not None:
        fcst = fcst.chunk({member_dim: -1})
    if climate.chunks is not None:
        climate = climate.chunk({climate_dim: -1})
    out = xr.apply_ufunc(
        _efi_core,
        fcst,
        climate.drop_vars([c for c in climate.coords if c not in climate.dims and c in fcst.coords]),
        input_core_dims=[[member_dim], [climate_dim]],
        dask="parallelized",
        output_dtypes=[np.float64],
        join="exact",
    )
    return out.rename("efi").assign_attrs(units="1", long_name="extreme forecast index")


def _window_mask(init: pd.DatetimeIndex, target: pd.Timestamp, window_days: float, past_only: bool) -> Any:
    # circular distance in day of year; other years only
    d = np.abs(init.day_of_year.values - target.day_of_year)
    d = np.minimum(d, 365.25 - d)
    keep = (d <= window_days) & (init.year.values != target.year)
    if past_only:
        keep &= init.year.values < target.year
    return keep


def model_climate(
    fcst: xr.DataArray,
    init_time: Any,
    *,
    window_days: float = 4,
    past_only: bool = False,
    init_dim: str = INIT_TIME,
    member_dim: str = MEMBER,
) -> xr.DataArray:
    """Model climate of one init date from the data's own forecasts of the same season.

    Pools the members of every forecast whose init date lies within ``window_days`` days of
    year (circular) of ``init_time`` in the *other* years (``past_only``: earlier years only),
    at the same lead time and grid point, as ENS-10 does with its 20 years of reforecasts
    (±4 days). Returns the samples along ``climate_sample`` (init dates × members).
    """
    if init_dim not in fcst.dims:
        raise EnsmlError(f"model_climate: forecast has no '{init_dim}' dimension")
    init = pd.DatetimeIndex(fcst[init_dim].values)
    keep = _window_mask(init, pd.Timestamp(init_time), window_days, past_only)
    if not keep.any():
        raise EnsmlError(
            f"model_climate: no forecasts within ±{window_days} days of {pd.Timestamp(init_time):%m-%d} "
            "in other years to build a model climate"
        )
    pool = fcst.isel({init_dim: np.flatnonzero(keep)})
    pool = pool.drop_vars([c for c in pool.coords if init_dim in pool[c].dims or member_dim in pool[c].dims])
    return pool.stack({CLIMATE_SAMPLE: (init_dim, member_dim)}, create_index=False).rename("climate")


def reforecast_efi(
    fcst: xr.DataArray,
    *,
    window_days: float = 4,
    past_only: bool = False,
    init_dim: str = INIT_TIME,
    member_dim: str = MEMBER,
) -> xr.DataArray:
    """EFI of every init date of a reforecast set against its own model climate.

    For each ``init_time`` the climate is :func:`model_climate` of the same data; returns the
    EFI with the forecast's dims less ``member_dim``.
    """
    if init_dim not in fcst.dims:
        raise EnsmlError(f"reforecast_efi: forecast has no '{init_dim}' dimension")
    parts = []
    for t in fcst[init_dim].values:
        clim = model_climate(
            fcst, t, window_days=window_days, past_only=past_only, init_dim=init_dim, member_dim=member_dim
        )
        parts.append(extreme_forecast_index(fcst.sel({init_dim: t}), clim, member_dim=member_dim))
    return xr.concat(parts, dim=init_dim).transpose(*[d for d in fcst.dims if d != member_dim])


def eecrps(
    crps: xr.DataArray,
    efi: xr.DataArray,
    *,
    normalised: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Extreme-event CRPS: pointwise CRPS weighted by the extremeness ``|EFI|``.

    * ``normalised=False`` (ENS-10's EECRPS, Ashkboos et al. 2022):
      :math:`\overline{|\mathrm{EFI}|\cdot\mathrm{CRPS}}`, the plain (weighted) mean of the
      product; it shrinks with the number of non-extreme points.
    * ``normalised=True``: :math:`\sum w|\mathrm{EFI}|\,\mathrm{CRPS} / \sum w|\mathrm{EFI}|`,
      an ``|EFI|``-weighted mean CRPS in CRPS units, comparable across regions and periods.

    ``crps`` is the pointwise (unreduced) CRPS of the model being scored; ``efi`` the EFI of
    the raw ensemble, which says how extreme the situation was (the same for every model).
    Points where either is NaN are left out.
    """
    for name, a in (("crps", crps), ("efi", efi)):
        if not isinstance(a, xr.DataArray):
            raise EnsmlError(f"eecrps: {name} must be an xarray.DataArray")
    if set(efi.dims) - set(crps.dims):
        raise EnsmlError(
            f"eecrps: efi dims ({', '.join(map(str, efi.dims))}) not among crps dims "
            f"({', '.join(map(str, crps.dims))})"
        )
    try:
        crps, efi = xr.align(crps, efi, join="exact")
    except ValueError as exc:
        raise EnsmlError(f"eecrps: crps and efi coordinates differ: {exc}") from exc
    a = np.abs(efi)
    prod = a * crps
    ok = prod.notnull()
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "func": "eecrps"}
    if not normalised:
        out = reduce_score(prod, weights=weights, **kw)
        return out.rename("eecrps").assign_attrs(long_name="mean of |EFI| x CRPS (ENS-10 EECRPS)")
    w = a.where(ok, 0.0)
    if weights is not None:
        w = w * check_weights(weights, prod, "eecrps")
    dims = resolve_reduce_dims(prod.dims, reduce_dims, preserve_dims, "eecrps")
    den = w.sum(dims)
    out = (w * crps.where(ok, 0.0)).sum(dims) / den.where(den > 0)
    return out.rename("eecrps_normalised").assign_attrs(long_name="|EFI|-weighted mean CRPS")
