"""Model climate for the EFI and the SOT: samples from reforecasts, their quantiles, shared checks.

A model climate ("M-climate") is the distribution of the model's own forecasts for the same
season, lead time and place. :func:`model_climate` pools the samples from a reforecast set;
:func:`climate_quantiles` turns them into the equally spaced quantiles (ECMWF: 101, 0 … 100 %)
that ECMWF's EFI and SOT take.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, MEMBER, QUANTILE
from ensml.scores.reduce import check_no_inf, require_dataarray

__all__ = ["CLIMATE_SAMPLE", "climate_quantiles", "model_climate"]

#: Dimension of model-climate samples (init dates × members), from :func:`model_climate`.
CLIMATE_SAMPLE = "climate_sample"
#: ECMWF's M-climate: percentiles 0, 1, …, 100 %.
N_PERCENTILES = 101

_TOL = 1e-6  # levels stored as float32 (e.g. read from a file) still match 0.9 or 0.99


def _dims(a: xr.DataArray) -> str:
    return ", ".join(map(str, a.dims)) or "none"


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
    (±4 days). Returns the samples along ``climate_sample`` (init dates × members), in the
    forecast's units; :func:`climate_quantiles` turns them into ECMWF's percentiles.
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


def climate_quantiles(
    samples: xr.DataArray, n: int = N_PERCENTILES, *, climate_dim: str = CLIMATE_SAMPLE
) -> xr.DataArray:
    """Equally spaced quantiles of model-climate samples, the climate ECMWF's EFI and SOT take.

    Parameters
    ----------
    samples : xr.DataArray
        Climate samples along ``climate_dim`` (e.g. from :func:`model_climate`), any other dims.
    n : int
        Number of quantiles, at levels ``0, 1/(n-1), …, 1``; ECMWF's M-climate has 101
        (percentiles 0 … 100 %).

    Returns
    -------
    xr.DataArray
        Quantiles along ``quantile`` (coordinate: the levels, dimensionless in [0, 1]), in the
        samples' units, then the samples' other dims. Linear interpolation between order
        statistics (``numpy.quantile``'s default), so the 0 and 1 levels are the minimum and
        maximum; NaN samples are skipped (all NaN: NaN); ±Inf is an error.
    """
    require_dataarray(samples, "climate_quantiles", "samples")
    if climate_dim not in samples.dims:
        raise EnsmlError(
            f"climate_quantiles: samples have no '{climate_dim}' dimension (dims: {_dims(samples)})"
        )
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise EnsmlError(f"climate_quantiles: n must be an integer >= 2 (levels 0 and 1), got {n!r}")
    if samples.sizes[climate_dim] == 0:
        raise EnsmlError(f"climate_quantiles: samples have no values along '{climate_dim}'")
    samples = check_no_inf(samples, "climate_quantiles", "samples")
    if samples.chunks is not None:
        samples = samples.chunk({climate_dim: -1})
    q = samples.quantile(np.linspace(0.0, 1.0, int(n)), dim=climate_dim)
    q[QUANTILE].attrs.update(units="1", long_name="quantile level")
    return q.rename("climate").assign_attrs(samples.attrs)


def quantile_levels(climate: xr.DataArray, climate_dim: str, func: str) -> np.ndarray:
    """The quantile levels of ``climate`` along ``climate_dim``, as fractions from 0 to 1.

    Read from the coordinate (fractions ending at 1, or percent ending at 100); without one,
    the levels are equally spaced from 0 to 1, ECMWF's convention. They must be strictly
    increasing and run from 0 to 1, as the EFI integrates over all of [0, 1].
    """
    n = climate.sizes[climate_dim]
    if n < 2:
        raise EnsmlError(
            f"{func}: climate has {n} quantile along '{climate_dim}'; at least 2 (levels 0 and 1) "
            f"are needed, ECMWF's M-climate has {N_PERCENTILES}"
        )
    if climate_dim not in climate.coords:
        return np.linspace(0.0, 1.0, n)
    lev = climate[climate_dim].values
    if lev.ndim != 1 or not np.issubdtype(lev.dtype, np.number) or not np.all(np.isfinite(lev)):
        raise EnsmlError(f"{func}: the '{climate_dim}' coordinate of the climate must hold finite numbers")
    lev = lev.astype(np.float64)
    if not np.all(np.diff(lev) > 0):
        raise EnsmlError(f"{func}: the climate's '{climate_dim}' levels must be strictly increasing")
    scale = 100.0 if abs(lev[-1] - 100.0) <= 100 * _TOL else 1.0
    lev = lev / scale
    if abs(lev[0]) > _TOL or abs(lev[-1] - 1.0) > _TOL:
        raise EnsmlError(
            f"{func}: the climate's '{climate_dim}' levels must run from 0 to 1 (or 0 to 100 %), "
            f"got {lev[0] * scale:g} to {lev[-1] * scale:g}"
        )
    lev[0], lev[-1] = 0.0, 1.0
    return lev


def check_eps(eps: float | None, func: str) -> float:
    """The bounded-variable threshold ``eps`` as a float, 0 for None (rule off), or an error."""
    if eps is None:
        return 0.0
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise EnsmlError(f"{func}: eps must be a number > 0 or None, got {eps!r}")
    if not (np.isfinite(eps) and eps > 0):
        raise EnsmlError(f"{func}: eps must be a finite number > 0 (None turns the rule off), got {eps!r}")
    return float(eps)


def level_index(levels: np.ndarray, percent: float, climate_dim: str, func: str) -> int:
    """Position of the ``percent`` % level among ``levels`` (fractions), or an error."""
    hit = np.flatnonzero(np.abs(levels - percent / 100.0) <= _TOL)
    if hit.size == 0:
        raise EnsmlError(
            f"{func}: the climate has no {percent:g} % quantile along '{climate_dim}' "
            f"({levels.size} levels from 0 to 100 %)"
        )
    return int(hit[0])


def check_ensemble_climate(
    fcst: xr.DataArray, climate: xr.DataArray, member_dim: str, climate_dim: str, func: str, hint: str = ""
) -> tuple[xr.DataArray, xr.DataArray]:
    """Check an ensemble and its model climate for a pointwise index; return both ready for ``apply_ufunc``.

    The climate has ``climate_dim`` and some of the forecast's other dims (it broadcasts over
    the rest) with the same sizes; ±Inf in either is an error (NaN is missing). Dask arrays
    are rechunked to one chunk along the core dims, and the climate's non-index coordinates
    that the forecast also has are dropped (the forecast's are kept).
    """
    require_dataarray(fcst, func, "forecast")
    require_dataarray(climate, func, "climate")
    if member_dim not in fcst.dims:
        raise EnsmlError(f"{func}: forecast has no member dimension '{member_dim}' (dims: {_dims(fcst)})")
    if fcst.sizes[member_dim] == 0:
        raise EnsmlError(f"{func}: forecast has no members (dimension '{member_dim}' is empty)")
    if climate_dim not in climate.dims:
        raise EnsmlError(f"{func}: climate has no '{climate_dim}' dimension (dims: {_dims(climate)}){hint}")
    extra = [d for d in climate.dims if d != climate_dim and d not in fcst.dims]
    if extra or member_dim in climate.dims:
        raise EnsmlError(
            f"{func}: climate dims ({_dims(climate)}) must be '{climate_dim}' and forecast dims "
            f"other than '{member_dim}' ({_dims(fcst)})"
        )
    for d in climate.dims:
        if d != climate_dim and climate.sizes[d] != fcst.sizes[d]:
            raise EnsmlError(
                f"{func}: climate has size {climate.sizes[d]} along '{d}', the forecast {fcst.sizes[d]}"
            )
    fcst = check_no_inf(fcst, func, "forecast")  # an Inf member would count as the most extreme
    climate = check_no_inf(climate, func, "climate")
    if fcst.chunks is not None:
        fcst = fcst.chunk({member_dim: -1})
    if climate.chunks is not None:
        climate = climate.chunk({climate_dim: -1})
    climate = climate.drop_vars([c for c in climate.coords if c not in climate.dims and c in fcst.coords])
    return fcst, climate
